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

# optional module (top-level import name) → the extra that installs it
EXTRAS = {"numba": "cpu", "mlx": "cpu", "cupy": "cuda", "cupy_backends": "cuda", "ray": "fleet", "nvidia": "nvrtc"}


def editable(package_root: Path = Path(__file__).resolve().parents[1]) -> bool:
    """True for an editable install or a run from the sources; False for an installed wheel."""
    return (package_root / "pyproject.toml").is_file()


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
