"""The one line that tells a user which extra installs a missing optional dependency, in the form that fits how
moecal itself was installed.

A wheel user must never be told `pip install -e '.[cuda]'` (there is no `.` to install from), and a developer in a
checkout should not be told to install moecal from the package index over their editable install. The test is where
the `harness` package lives: an editable install and a run from the sources import it from the checkout, next to
pyproject.toml; a wheel installs it into site-packages, where no pyproject.toml sits beside it. (pip's PEP 610
`direct_url.json` would say the same, but a stray `moecal.egg-info` in the checkout shadows the dist-info that holds
it.) Imports no heavy module: doctor and the CLI's error path call this.
"""

from __future__ import annotations

from pathlib import Path

# optional modules (top-level import name) no backend owns → the extra that installs them
OTHER_EXTRAS = {"ray": "fleet", "nvidia": "nvrtc"}


def extras() -> dict[str, str]:
    """optional module → the extra that installs it: each backend's libraries and install modules, plus
    OTHER_EXTRAS. A module several backends' extras install (mlx: metal and cpu) is hinted with the last one in
    registry order — cpu, the backend every machine can run."""
    from harness.config.backend_specs import BACKENDS

    found: dict[str, str] = {}
    for spec in BACKENDS:
        found.update({module: spec.extra for module in (*spec.libraries, *spec.install_modules) if module != "numpy"})
    return {**found, **OTHER_EXTRAS}


def editable(package_root: Path = Path(__file__).resolve().parents[2]) -> bool:
    """True for an editable install or a run from the sources; False for an installed wheel."""
    return (package_root / "pyproject.toml").is_file()


def install_command(extra: str) -> str:
    """`pip install 'moecal[cuda]'` for a wheel, `pip install -e '.[cuda]'` in a checkout."""
    return f"pip install -e '.[{extra}]'" if editable() else f"pip install 'moecal[{extra}]'"


def missing_module_hint(module: str | None) -> str | None:
    """`numba is not installed: pip install 'moecal[cpu]'` for an optional module, else None (a real bug)."""
    top = (module or "").split(".")[0]
    extra = extras().get(top)
    if extra is None:
        return None
    return f"{top} is not installed (the '{extra}' extra): {install_command(extra)}"
