"""mlxcel's source tree as the decision's target: the current Dff caps, the MLX pin, and the patch that changes a cap.

mlxcel keeps one compiled-in default per backend in `src/models/switch_layers.rs`
(`const FUSED_MOE_MAX_DFF_METAL: i32 = 4096;`, `const FUSED_MOE_MAX_DFF_CUDA: i32 = 8192;`) and pins MLX in
`src/lib/mlx-cpp/CMakeLists.txt` (`GIT_TAG <commit>` of its `FetchContent_Declare(mlx …)`). Why read the tree
rather than trust the numbers moecal knows: the decision compares against the cap in force, and a maintainer
applies the patch to the tree they have, so both must come from that tree (`--mlxcel-src DIR`). Without one the
patch is written against the published defaults (as a zero-context hunk, which `patch -p1` places by content) and
says so.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from harness.analysis.decision.decision_facts import MLXCEL_CONSTANTS, MLXCEL_DEFAULT_CAPS
from harness.config import knobs as launch_knobs
from harness.config.backend_specs import mlxcel_caps
from harness.errors import InputError
from harness.thresholds import MAX_CAP

SWITCH_LAYERS = "src/models/switch_layers.rs"
MLX_CMAKE = "src/lib/mlx-cpp/CMakeLists.txt"
CARGO_TOML = "Cargo.toml"
_DECLARATION = r"^(\s*(?:pub(?:\([a-z]+\))?\s+)?const\s+{name}\s*:\s*i32\s*=\s*)(\d+)(\s*;.*)$"
_MLX_TAG = re.compile(r"GIT_REPOSITORY\s+\"[^\"]*ml-explore/mlx(?:\.git)?\"\s+GIT_TAG\s+([0-9A-Za-z._-]+)")
# Where the declarations sit in the published switch_layers.rs (mlxcel 0.4.2); `patch` finds them by content if
# they moved, so these only give a hunk without a tree a plausible position.
_PUBLISHED_LINE = {backend: cap.published_line for backend, cap in mlxcel_caps().items()}
# what an addendum says of a patch made without a tree
UNCHECKED_NOTE = (
    "written against the published defaults, not checked against an mlxcel tree (pass --mlxcel-src); "
    "apply it with `patch -p1` or `git apply --unidiff-zero`"
)
_VERSION = re.compile(r"^\[package\][^\[]*?^version\s*=\s*\"([^\"]+)\"", re.MULTILINE | re.DOTALL)


class MlxcelTreeJSON(TypedDict):
    """An MlxcelSource as a report's sidecar records it (`mlxcel`): what the addendum and check-reports read back."""

    caps: dict[str, int]
    checked: bool
    mlx_pin: str
    version: str
    path: str


@dataclass(frozen=True)
class MlxcelSource:
    """What moecal knows of the mlxcel tree a decision targets (`checked`: read from a tree, not assumed)."""

    caps: dict[str, int]
    checked: bool
    mlx_pin: str = ""
    version: str = ""
    path: str = ""
    lines: tuple[str, ...] = field(default=(), repr=False)  # switch_layers.rs as read (empty when not checked)

    def as_json(self) -> MlxcelTreeJSON:
        return {
            "caps": dict(self.caps),
            "checked": self.checked,
            "mlx_pin": self.mlx_pin,
            "version": self.version,
            "path": self.path,
        }


def known_defaults() -> MlxcelSource:
    """The published defaults (mlxcel 0.4), used when no tree is given."""
    return MlxcelSource(dict(MLXCEL_DEFAULT_CAPS), checked=False)


def _read(path: Path) -> str:
    """A source file's text; anything but a regular file (a FIFO would block the read forever, a device never end
    it) is refused."""
    if path.exists() and not path.is_file():
        raise InputError(str(path), "--mlxcel-src", "not a regular file")
    try:  # newline="": a CRLF file keeps its \r, so a patch's context lines match its bytes (git apply)
        with open(path, encoding="utf-8", newline="") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), "--mlxcel-src", f"cannot read: {exc}") from None


# the block `report` writes into switch_layers.rs (harness.output.defaults.device_defaults): its markers and functions
BEGIN = "// moecal: per-device-class fused-MoE defaults (generated; replace the whole block)"
END = "// moecal: end of per-device-class defaults"
CAP_CLASS_FUNCTION = "fused_moe_max_dff_for_class"


def class_functions() -> tuple[str, ...]:
    """The functions of the block: the cap's lookup and one per launch knob (harness.config.knobs)."""
    return (CAP_CLASS_FUNCTION, *(knob.class_function for knob in launch_knobs.KNOBS))


def _check_class_block(text: str, where: str) -> None:
    """The per-class block is there once, between one begin and one end marker in order, or not at all: a doubled,
    reversed or half pair, or the functions outside the markers, would leave a second definition after the patch
    (a tree that no longer compiles). Checked when the tree is read, before `report` writes anything."""
    begins, ends = text.count(BEGIN), text.count(END)
    if (begins, ends) == (1, 1) and text.find(BEGIN) < text.find(END):
        return
    if begins or ends:
        raise InputError(where, "moecal markers", "not one begin and one end marker, in order: fix by hand")
    if any(f"fn {name}(" in text for name in class_functions()):
        raise InputError(where, "moecal markers", "defines the per-class functions outside moecal's markers")


def read_source(root: str | Path) -> MlxcelSource:
    """The caps declared in `root`'s switch_layers.rs, its MLX pin and crate version (each declaration must be
    there exactly once: a tree without it is not one this patch can target)."""
    root = Path(root)
    switch = root / SWITCH_LAYERS
    text = _read(switch)
    _check_class_block(text, str(switch))
    caps = {}
    for backend, name in MLXCEL_CONSTANTS.items():
        found = re.findall(_DECLARATION.format(name=name), text, re.MULTILINE)
        if len(found) != 1:
            raise InputError(
                str(switch), name, f"expected one `const {name}: i32 = N;` declaration, found {len(found)}"
            )
        digits = found[0][1]
        if len(digits) > len(str(MAX_CAP)):  # int() of 5000 digits raises; no i32 cap is that long anyway
            raise InputError(str(switch), name, f"{digits[:12]}… ({len(digits)} digits) is not a cap")
        caps[backend] = int(digits)
    cmake = root / MLX_CMAKE
    pins = _MLX_TAG.findall(_read(cmake)) if cmake.exists() else []
    cargo = root / CARGO_TOML
    version = _VERSION.search(_read(cargo)) if cargo.exists() else None
    return MlxcelSource(
        caps,
        checked=True,
        mlx_pin=pins[0] if len(set(pins)) == 1 else "",
        version=version.group(1) if version else "",
        path=str(root),
        lines=tuple(text.splitlines(keepends=True)),
    )


def _replace(line: str, name: str, value: int) -> str:
    return re.sub(_DECLARATION.format(name=name), lambda m: f"{m.group(1)}{value}{m.group(3)}", line)


def cap_patch(source: MlxcelSource, new_caps: dict[str, int]) -> str:
    """A unified diff (`a/`/`b/` prefixes: `git apply`, `patch -p1`) of switch_layers.rs setting `new_caps`
    ({backend: cap}, mlxcel backends only); '' when nothing changes."""
    changes = {b: v for b, v in new_caps.items() if b in MLXCEL_CONSTANTS and source.caps.get(b) != v}
    if not changes:
        return ""
    if source.lines:
        after = list(source.lines)
        for backend, value in changes.items():
            after = [_replace(line, MLXCEL_CONSTANTS[backend], value) for line in after]
        diff = difflib.unified_diff(source.lines, after, f"a/{SWITCH_LAYERS}", f"b/{SWITCH_LAYERS}")
        return "".join(diff)
    hunks = [f"--- a/{SWITCH_LAYERS}\n", f"+++ b/{SWITCH_LAYERS}\n"]
    for backend, value in sorted(changes.items(), key=lambda item: _PUBLISHED_LINE[item[0]]):
        name = MLXCEL_CONSTANTS[backend]
        line = _PUBLISHED_LINE[backend]
        hunks += [
            f"@@ -{line} +{line} @@\n",
            f"-const {name}: i32 = {source.caps[backend]};\n",
            f"+const {name}: i32 = {value};\n",
        ]
    return "".join(hunks)
