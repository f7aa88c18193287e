"""Where moecal finds what it reads at run time: the model catalog, the shipped sweep configs (presets) and the
kernel sources.

They are package data of `harness` under harness/data/, found through importlib.resources, so a checkout, an
editable install and an installed wheel all find them the same way — never relative to a checkout that a pip
install does not have. In the repository harness/data/kernels and harness/data/configs are symbolic links to the
top-level kernels/ and configs/: one copy of each file, where a reader of the repository looks for it; building the
sdist or the wheel copies the files behind the links (see README "Installing").

Nothing here imports a backend library: `moecal presets` and the catalog must work on a machine with none.
"""

from __future__ import annotations

import importlib.resources
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.errors import InputError

CATALOG_NAME = "models.yaml"  # the model catalog lives beside the presets but is not one
SUMMARY_CHARS = 80  # `moecal presets` prints one line per preset


def user_cache_dir(name: str) -> Path:
    """moecal's cache folder `name` for this user: $XDG_CACHE_HOME/moecal/NAME, else ~/.cache/moecal/NAME. What is
    cached (compiled kernels, synthetic checkpoints) is derived and large, so it never goes into the checkout."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "moecal" / name


def data_dir(name: str) -> Path:
    """A directory of harness/data as a file-system path: callers glob, hash and print these files, and pip always
    installs a package unzipped, so its data is on the file system."""
    path = importlib.resources.files("harness").joinpath("data", name)
    if not isinstance(path, Path) or not path.is_dir():
        raise RuntimeError(f"moecal's package data {name!r} is missing ({path}); reinstall moecal")
    return path


def kernel_dir() -> Path:
    """kernels/: cuda/*.cu(h) and metal/*.metal."""
    return data_dir("kernels")


def config_dir() -> Path:
    """configs/: the model catalog and the preset sweep configs."""
    return data_dir("configs")


def catalog_path() -> Path:
    return config_dir() / CATALOG_NAME


@dataclass(frozen=True)
class Preset:
    """One shipped sweep config, as `moecal presets` lists it."""

    name: str
    path: Path
    backend: str
    workload: str
    summary: str  # the first comment line of the file: what the preset is for


def _summary(text: str, limit: int = SUMMARY_CHARS) -> str:
    """The first sentence of the file's leading comment, cut at a word to `limit` characters."""
    words: list[str] = []
    for line in text.splitlines():
        comment = line.removeprefix("#").strip()
        if not line.startswith("#") or not comment:
            break
        words += comment.split()
    sentence = " ".join(words).split(". ")[0]
    if len(sentence) <= limit:
        return sentence
    return sentence[: limit - 1].rsplit(" ", 1)[0] + "…"


def presets() -> list[Preset]:
    """Every shipped sweep config, by name. Read as plain YAML (not validated): listing must not fail because one
    preset needs a backend this machine lacks — `moecal plan NAME` validates it."""
    found = []
    for path in sorted(config_dir().glob("*.yaml")):
        if path.name == CATALOG_NAME:
            continue
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text) or {}
        workload = data.get("workload") or {}
        found.append(
            Preset(
                name=path.stem,
                path=path,
                backend=str(data.get("backend", "auto")),
                workload=str(workload.get("kind", "?")) if isinstance(workload, dict) else "?",
                summary=_summary(text),
            )
        )
    return found


def config_argument(path: Path) -> Path:
    """A command's CONFIG argument: a file that exists (relative to the caller's working directory) wins;
    otherwise a bare preset name (`cpu-smoke` or `cpu-smoke.yaml`) means the shipped preset."""
    if path.exists() or path.parent != Path("."):
        return path
    name = path.name.removesuffix(".yaml")
    for preset in presets():
        if preset.name == name:
            return preset.path
    names = ", ".join(p.name for p in presets())
    raise InputError(str(path), "(file)", f"no such file, and not a preset name (presets: {names})")
