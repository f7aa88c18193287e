"""The one line that tells a user which extra installs a missing optional dependency, in the form that fits how
moecal itself was installed.

A wheel user must never be told `pip install -e '.[cuda]'` (there is no `.` to install from), and a developer in a
checkout should not be told to install moecal from the package index over their editable install. pip records an
editable install in the distribution's `direct_url.json` (PEP 610, `dir_info.editable`); a checkout run without
installing (`python -m harness` next to pyproject.toml) counts as editable too. Importing no heavy module: doctor and
the CLI's error path call this.
"""

from __future__ import annotations

import functools
import json
from importlib import metadata
from pathlib import Path

# optional module (top-level import name) → the extra that installs it
EXTRAS = {"numba": "cpu", "mlx": "cpu", "cupy": "cuda", "cupy_backends": "cuda", "ray": "fleet", "nvidia": "nvrtc"}


@functools.cache
def editable() -> bool:
    """True for an editable install or a run from the sources; False for an installed wheel."""
    try:
        text = metadata.distribution("moecal").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return (Path(__file__).resolve().parents[1] / "pyproject.toml").is_file()
    if not text:
        return False
    try:
        return bool(json.loads(text).get("dir_info", {}).get("editable"))
    except ValueError:
        return False


def install_command(extra: str) -> str:
    """`pip install 'moecal[cuda]'` for a wheel, `pip install -e '.[cuda]'` in a checkout."""
    return f"pip install -e '.[{extra}]'" if editable() else f"pip install 'moecal[{extra}]'"


def missing_module_hint(module: str | None) -> str | None:
    """`numba is not installed: pip install 'moecal[cpu]'` for an optional module, else None (a real bug)."""
    top = (module or "").split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    return f"{top} is not installed (the '{extra}' extra): {install_command(extra)}"
