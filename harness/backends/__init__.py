"""Backends: one module per device family, each implementing `harness.backends.base.Backend`.

Importing this package never imports MLX or CuPy; `get_backend` imports lazily so a machine without Metal or a
GPU can still use the rest of the harness.
"""

from __future__ import annotations

import importlib

from harness.backends.base import Backend, BackendUnavailable

BACKEND_NAMES = ("metal", "cuda", "cpu")
_MODULES = {"metal": "harness.backends.metal", "cuda": "harness.backends.cuda", "cpu": "harness.backends.cpu"}


def backend_class(name: str) -> type[Backend]:
    if name not in _MODULES:
        raise BackendUnavailable(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)} or auto")
    return importlib.import_module(_MODULES[name]).BACKEND


def availability(name: str) -> tuple[bool, str]:
    """(usable, reason) for one backend, never raising: `moecal doctor` prints this."""
    try:
        return backend_class(name).availability()
    except Exception as exc:  # an import error in an optional dependency is a reason, not a crash
        return False, f"{type(exc).__name__}: {exc}"


def resolve_name(name: str) -> str:
    """Map `auto` to the first usable backend in the order metal → cuda → cpu."""
    if name != "auto":
        return name
    for candidate in BACKEND_NAMES:
        if availability(candidate)[0]:
            return candidate
    raise BackendUnavailable("no backend is usable here; run `moecal doctor` to see why")


def get_backend(name: str = "auto") -> Backend:
    """Instantiate a usable backend or raise BackendUnavailable with the reason."""
    resolved = resolve_name(name)
    ok, reason = availability(resolved)
    if not ok:
        raise BackendUnavailable(f"backend {resolved!r} is not usable here: {reason}")
    return backend_class(resolved)()
