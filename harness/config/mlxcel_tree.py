"""Derive what moecal must know of mlxcel from an mlxcel source tree (`moecal init --mlxcel-src DIR`).

The shipped table (harness.config.mlxcel_families) is a reading of the source at one date; a maintainer calibrating
their own checkout should get the families and rules of that checkout. Read from the tree:

- the decline rules: the body of `SwitchGLU::forward_fused_kernel` in src/models/switch_layers.rs (the bit widths
  it accepts for gate/up and down, whether it checks `"affine"`, the Dff multiple a 6-bit down needs) and whether
  it reads the cap (`fused_moe_max_dff_from` / `MLXCEL_FUSED_MOE_MAX_DFF`);
- the wired families: every src/models/*.rs that calls `.forward_fused_kernel(`. One that defines its own
  `fn forward_fused_kernel` runs its own copy, which reads the cap only if that file mentions it; one that imports
  its `SwitchGLU` / `SparseMoeBlock` from another model file inherits that file's wiring (qwen3_vl_moe from
  qwen3_moe before PR #1888; qwen3.5 from qwen3_next); otherwise it calls the shared one;
- a model file that imports a wired file's MoE block without calling the kernel itself inherits it too;
- the compiled-in caps (`const FUSED_MOE_MAX_DFF_<BACKEND>: i32 = N;`) and each launch knob's default(s), read by
  the declaration its row of harness.config.knobs gives (`int sgy = N;` in the kernel source).

A family is named by its file's stem, except where mlxcel's file name differs from the config.json `model_type`
(FILE_FAMILIES, a documented mapping, not a list of families). Model files that never call the kernel are absent
from the derived table: with a tree, what the tree does not wire is either in the shipped table as `none` or
unknown, and the dispatch pass settles it.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.config import knobs as launch_knobs
from harness.config.eligibility import SWITCH_LAYERS, KernelRules, Knowledge
from harness.config.mlxcel_families import TABLE, FamilyWiring
from harness.errors import InputError

# mlxcel file stem → the config.json model_type its family has, where the two differ
FILE_FAMILIES = {"lfm2": "lfm2_moe", "qwen3_5": "qwen3_5_moe", "laguna_layers": "laguna"}
_CAP_READ = ("fused_moe_max_dff_from", "MLXCEL_FUSED_MOE_MAX_DFF")
_IMPORT = re.compile(r"(?:super|crate::models)::(\w+)::(?:\{([^}]*)\}|(\w+))")
_MOE_TYPES = ("SwitchGLU", "SparseMoeBlock", "SwitchGeGLU")


def _read(path: Path) -> str:
    if path.exists() and not path.is_file():  # a FIFO would block the read forever, a device never end
        raise InputError(str(path), "--mlxcel-src", "not a regular file")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), "--mlxcel-src", f"cannot read: {exc}") from None


def _function_body(text: str, name: str) -> str:
    """The text of the first `fn name(` up to the next `fn` declaration (or the end): enough to see what it checks."""
    start = re.search(rf"^\s*(?:pub(?:\([a-z]+\))?\s+)?fn {name}\(", text, re.MULTILINE)
    if start is None:
        return ""
    following = re.compile(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?fn \w+", re.MULTILINE).search(text, start.end())
    return text[start.start() : following.start() if following else len(text)]


def rules_from(switch_layers: str) -> KernelRules:
    """The declines of the shared forward_fused_kernel, read from its body."""
    body = _function_body(switch_layers, "forward_fused_kernel")
    if not body:
        raise InputError(SWITCH_LAYERS, "forward_fused_kernel", "not found: not an mlxcel tree moecal can read")
    gate = tuple(sorted({int(b) for b in re.findall(r"gate\w*\.bits != (\d+)", body)}))
    down = tuple(sorted({int(b) for b in re.findall(r"down\w*\.bits != (\d+)", body)}))
    multiple = re.search(r"bits == 6 && dff % (\d+)", body)
    return KernelRules(
        gate_up_bits=gate or KernelRules.gate_up_bits,
        down_bits=down or KernelRules.down_bits,
        six_bit_dff_multiple=int(multiple.group(1)) if multiple else KernelRules.six_bit_dff_multiple,
        affine_only='"affine"' in body,
        source=f"{SWITCH_LAYERS} SwitchGLU::forward_fused_kernel (read from the tree)",
    )


def _imports(text: str) -> dict[str, str]:
    """MoE type → the model file (stem) it is imported from, for SwitchGLU / SparseMoeBlock / SwitchGeGLU."""
    found = {}
    for module, group, single in _IMPORT.findall(text):
        for name in re.split(r"[\s,]+", group or single):
            if name in _MOE_TYPES and module != "switch_layers":
                found[name] = module
    return found


def wiring_from(models: Path, shared_reads_cap: bool) -> dict[str, FamilyWiring]:
    """Family → wiring for every model file of `models` that reaches the fused kernel."""
    # regular files only: a FIFO or socket named like a model file is no source (and a FIFO would block the read)
    texts = {p.stem: _read(p) for p in sorted(models.glob("*.rs")) if not p.stem.endswith("_tests") and p.is_file()}
    texts.pop("switch_layers", None)

    def direct(stem: str) -> FamilyWiring | None:
        text = texts[stem]
        where = f"src/models/{stem}.rs"
        if ".forward_fused_kernel(" not in text:
            return None
        if re.search(r"fn forward_fused_kernel\(", text):
            reads = any(m in _function_body(text, "forward_fused_kernel") for m in _CAP_READ)
            how = "its own forward_fused_kernel copy, " + ("reads the cap" if reads else "no Dff cap")
            return FamilyWiring(stem, "cap" if reads else "switch", f"{where}: {how} (read from the tree)")
        origin = next((m for name, m in _imports(text).items() if m in texts and name == "SwitchGLU"), None)
        if origin and origin != stem and (inherited := direct(origin)):
            return FamilyWiring(stem, inherited.wiring, f"{where}: SwitchGLU from {origin}.rs; {inherited.source}")
        how = "the shared SwitchGLU::forward_fused_kernel, " + ("reads the cap" if shared_reads_cap else "no Dff cap")
        return FamilyWiring(stem, "cap" if shared_reads_cap else "switch", f"{where}: {how} (read from the tree)")

    table: dict[str, FamilyWiring] = {}
    for stem, text in texts.items():
        entry = direct(stem)
        if entry is None:  # a family that reuses a wired file's MoE block (qwen3_5 → qwen3_next)
            origin = next((m for m in _imports(text).values() if m in texts and m != stem), None)
            inherited = direct(origin) if origin else None
            if inherited is None:
                continue
            entry = FamilyWiring(stem, inherited.wiring, f"src/models/{stem}.rs: MoE block from {origin}.rs; "
                                 f"{inherited.source}")  # fmt: skip
        family = FILE_FAMILIES.get(stem, stem)
        table[family] = FamilyWiring(family, entry.wiring, entry.source)
    return table


def caps_and_knob_defaults(root: Path) -> list[str]:
    """What the tree compiles in, one line each with its file: the Dff caps, and the default(s) each launch knob of
    the knob table declares in its source file (one per build branch), where the tree has that file."""
    notes = [
        f"cap {name.lower()} = {value} ({SWITCH_LAYERS})"
        for name, value in re.findall(
            r"const FUSED_MOE_MAX_DFF_(\w+)\s*:\s*i32\s*=\s*(\d+)", _read(root / SWITCH_LAYERS)
        )
    ]
    for knob in launch_knobs.KNOBS:
        source = root / knob.source_file
        defaults = knob.declared_defaults(_read(source)) if source.is_file() else []
        if defaults:
            notes.append(f"{knob.env} default(s) {', '.join(map(str, defaults))} ({knob.source_file})")
    return notes


_SHA = re.compile(r"[0-9a-f]{7,64}")


def _commit(git: Path) -> str:
    """The checked-out commit (12 hex digits) from `git`/HEAD, or "". A ref is followed only to a file under
    .git/refs/ (`ref: ../../outside` would put the start of any file into the config), and only a hex commit id
    is taken from what is read."""
    head = git / "HEAD"
    if not head.is_file():
        return ""
    ref = _read(head).strip()
    if ref.startswith("ref: "):
        name = ref.removeprefix("ref: ")
        target = git / name
        inside = (git / "refs").resolve()
        if not name.startswith("refs/") or ".." in Path(name).parts or not target.resolve().is_relative_to(inside):
            return ""
        ref = _read(target).strip() if target.is_file() else ""
    return ref[:12] if _SHA.fullmatch(ref) else ""


def tree_pin(root: Path) -> str:
    """The tree's identity for meta.json's `library_pin`: crate version, git commit (when the tree is a checkout)
    and MLX pin (src/lib/mlx-cpp/CMakeLists.txt), whichever can be read."""
    version = (
        re.search(r'^version\s*=\s*"([^"]+)"', _read(root / "Cargo.toml"), re.M)
        if (root / "Cargo.toml").is_file()
        else None
    )
    commit = _commit(root / ".git")
    cmake = root / "src" / "lib" / "mlx-cpp" / "CMakeLists.txt"
    mlx = (
        re.search(r"ml-explore/mlx(?:\.git)?\"?\s+GIT_TAG\s+([0-9A-Za-z._-]+)", _read(cmake))
        if cmake.is_file()
        else None
    )
    parts = [f"mlxcel {version.group(1)}" if version else "mlxcel", commit, f"MLX {mlx.group(1)}" if mlx else ""]
    return " ".join(p for p in parts if p) + f" (tree {root})"


def derive(root: str | Path) -> tuple[Knowledge, list[str]]:
    """The Knowledge of the tree at `root` (the shipped table's `none` entries kept for families the tree does not
    wire, so a local-SwitchGLU family still reads as never running the kernel) and lines saying what was read."""
    root = Path(root)
    switch = _read(root / SWITCH_LAYERS)
    rules = rules_from(switch)
    shared_reads_cap = any(m in _function_body(switch, "forward_fused_kernel") for m in _CAP_READ)
    derived = wiring_from(root / "src" / "models", shared_reads_cap)
    families = {f: w for f, w in TABLE.items() if w.wiring == "none" and f not in derived}
    families.update(derived)
    knowledge = Knowledge(families, rules, f"the mlxcel tree {root}")
    notes = [
        f"decline rules: gate/up {'/'.join(map(str, rules.gate_up_bits))}-bit, down "
        f"{'/'.join(map(str, rules.down_bits))}-bit, {'affine only, ' if rules.affine_only else ''}6-bit down needs "
        f"Dff % {rules.six_bit_dff_multiple} == 0 ({rules.source})",
        *caps_and_knob_defaults(root),
    ]
    return knowledge, notes
