"""The per-device defaults as entries in the shape of mlxcel's autotune store, so a binary can load them at start-up.

mlxcel's autotuner (src/lib/mlxcel-core/src/autotune/store.rs, `TacticRecord`) keeps one record per key
`op|runner|device|bucket|dtype` with the `version` of its schema, the `mlxcel_version` and `mlx_commit` it was
measured under, and a `tactic` (`label` and integer `params`); `TacticRecord::matches` discards an entry whose
version, key fields, mlxcel version or MLX commit differ from the running binary's (a miss, never an error). It has
no fused-MoE op. These entries use the same fields, with an op for the cap and one per launch knob:

- `fused_moe_max_dff`: tactic `max_dff=N`, the decided cap (`MLXCEL_FUSED_MOE_MAX_DFF`);
- `fused_moe_<knob>`: tactic `<knob>=N`, written only where a knob sweep chose it, for each launch knob of the knob
  table (harness.config.knobs): today `fused_moe_sgy`, tactic `sgy=N` (`MLXCEL_FUSED_MOE_SGY`).

The device is keyed at two levels, looked up in this order (docs/mlxcel.md): the exact `device` (that device's own
decision), then its `architecture` (the device class of harness.output.defaults.device_defaults: the smallest cap
decided over the class's devices, which sends no measured device's model down its slower path), then nothing: the
backend's compiled-in default. Each entry carries its evidence (the SHA-256 of each run's samples file and one
digest over them), the condition under which it must be removed, and `entry_sha256` over the rest of the entry, so
an edited entry is refused when moecal reads it back (read_entries) instead of shipping a number nobody measured.
`bucket` is `decode` (the kernel runs only for a single-token input) and `dtype` `affine` (the only quantization
mode it takes): the decline rules of switch_layers.rs, not a shape bucket.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.analysis.comparison.backend_defaults import Defaults, RunResult
from harness.config import knobs as launch_knobs
from harness.errors import InputError
from harness.json_input import JSONObject
from harness.output.bench_export import run_label
from harness.output.defaults.device_defaults import class_defaults, run_class
from harness.runs.formats import write_text_atomic
from harness.runs.provenance import file_sha256
from harness.runs.rundir import RunDirectory, refuse_stored

FORMAT = "moecal-autotune-entries"
VERSION = 1
LEVELS = ("device", "architecture")  # the lookup order; after them the backend default
BUCKET, DTYPE = "decode", "affine"
FIELDS: dict[str, type | tuple[type, ...]] = {
    "version": int,
    "op": str,
    "runner": str,
    "level": str,
    "device": str,
    "architecture": str,
    "bucket": str,
    "dtype": str,
    "mlxcel_version": str,
    "mlx_commit": str,
    "tactic": dict,
    "backend_default": (int, type(None)),
    "evidence": dict,
    "remove_when": str,
    "entry_sha256": str,
}
ENTRY_SUFFIX = "-autotune.json"
CAP_OP = "fused_moe_max_dff"


def ops() -> dict[str, str]:
    """op → the tactic label's parameter name: the cap's, then one per launch knob (harness.config.knobs)."""
    return {CAP_OP: "max_dff", **{knob.op: knob.name for knob in launch_knobs.KNOBS}}


def samples_file(path: Path) -> Path:
    """The file holding a run's measurements: a run directory's samples.csv, else the input file itself."""
    path = Path(path)
    return RunDirectory(path).samples if path.is_dir() else path


def evidence(runs: Sequence[RunResult]) -> dict[str, object]:
    """Each run's samples digest and one digest over them (sorted, so the order of the runs does not matter). A run
    named twice is one piece of evidence; two runs of one folder name with other samples are told apart by their
    digest's first characters (a dict keyed by name alone would keep one of them, and the read-back would refuse
    the entry)."""
    pairs = sorted({(run.path.name, file_sha256(samples_file(run.path))) for run in runs})
    names = [name for name, _ in pairs]
    files = [(name if names.count(name) == 1 else f"{name}@{digest[:12]}", digest) for name, digest in pairs]
    joined = "\n".join(f"{name} {digest}" for name, digest in files)
    return {
        "digest": hashlib.sha256(joined.encode()).hexdigest(),
        "samples_sha256": {name: digest for name, digest in files},
    }


def _entry_digest(entry: Mapping[str, object]) -> str:
    body = {k: v for k, v in entry.items() if k != "entry_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _entry(
    op: str, level: str, runs: Sequence[RunResult], value: int, extra: Mapping[str, object], architecture: str
) -> JSONObject:
    binding = runs[0]
    label = run_label(binding.analysis.provenance, binding.backend, binding.device)
    name = ops()[op]
    build = f"mlxcel {label.mlxcel_version or '(not recorded)'} / MLX {label.mlx_commit or '(not recorded)'}"
    entry: JSONObject = {
        "version": VERSION,
        "op": op,
        "runner": binding.backend,
        "level": level,
        "device": binding.device if level == "device" else "",
        "architecture": architecture,
        "bucket": BUCKET,
        "dtype": DTYPE,
        "mlxcel_version": label.mlxcel_version,
        "mlx_commit": label.mlx_commit,
        "tactic": {"label": f"{name}={value}", "params": [value]},
        "backend_default": binding.analysis.current_default if op == CAP_OP else None,
        "evidence": {**evidence(runs), **extra},
        "remove_when": (
            f"the binary is not {build} (the entry then never matches: remove it), a later calibration of this "
            f"{level} supersedes it, or the fused-MoE kernels (mlx_cxx_kernels.cpp) or switch_layers.rs change"
        ),
    }
    entry["entry_sha256"] = _entry_digest(entry)
    return entry


def build_entries(defaults: Defaults) -> list[JSONObject]:
    """Device entries (each device's own decided cap), then architecture entries (a class's cap and, where a knob
    sweep chose them, its launch knobs' values)."""
    entries = []
    for row in defaults.devices:
        runs = [r for r in defaults.runs if (r.backend, r.device) == (row.backend, row.device)]
        architecture = run_class(runs[0])
        # no entry for a device the run does not name: no binary's device is called UNKNOWN_DEVICE
        if row.recommended is not None and runs[0].device_recorded and architecture is not None:
            entries.append(_entry(CAP_OP, "device", runs, row.recommended, {"action": row.action}, architecture))
    for cls in class_defaults(defaults):
        runs = [r for r in defaults.runs if run_class(r) == cls.device_class and r.device in cls.devices]
        if cls.cap is not None:
            extra = {"crossover_ci": cls.cap_interval, "devices": list(cls.devices)}
            entries.append(_entry(CAP_OP, "architecture", runs, cls.cap, extra, cls.device_class))
        for chosen in cls.knobs:
            if chosen.value is not None and chosen.swept:
                why = {"why": chosen.evidence}
                entries.append(_entry(chosen.knob.op, "architecture", runs, chosen.value, why, cls.device_class))
    return entries


def write_entries(defaults: Defaults, out_dir: Path, stem: str) -> tuple[Path, list[JSONObject]]:
    """`<stem>-autotune.json` beside the addendum and its entries as read back and validated from it."""
    path = Path(out_dir) / f"{stem}{ENTRY_SUFFIX}"
    refuse_stored(path, "write the report somewhere else (--out)")
    document = {"format": FORMAT, "version": VERSION, "entries": build_entries(defaults)}
    write_text_atomic(path, json.dumps(document, indent=1) + "\n")
    return path, read_entries(path)


def _check_entry(path: Path, index: int, entry: object) -> JSONObject:
    where = f"entries[{index}]"
    if not isinstance(entry, dict):
        raise InputError(str(path), where, "not an object")
    for field, kind in FIELDS.items():
        if field not in entry:
            raise InputError(str(path), f"{where}.{field}", "missing")
        if not isinstance(entry[field], kind) or isinstance(entry[field], bool):
            raise InputError(str(path), f"{where}.{field}", f"{entry[field]!r} has the wrong type")
    if entry["version"] != VERSION:
        raise InputError(str(path), f"{where}.version", f"{entry['version']}: this moecal reads version {VERSION}")
    known_ops = ops()
    if entry["op"] not in known_ops:
        raise InputError(str(path), f"{where}.op", f"{entry['op']!r}: one of {', '.join(known_ops)}")
    if entry["level"] not in LEVELS or (entry["level"] == "device") != bool(entry["device"]):
        raise InputError(str(path), f"{where}.level", f"{entry['level']!r} with device {entry['device']!r}")
    tactic = entry["tactic"]
    params = tactic.get("params")
    if (
        not isinstance(params, list)
        or len(params) != 1
        or not isinstance(params[0], int)
        or params[0] < 1
        or tactic.get("label") != f"{known_ops[entry['op']]}={params[0]}"
    ):
        raise InputError(str(path), f"{where}.tactic", f"{tactic!r}: one positive integer, labelled by its op")
    digest = entry["evidence"].get("digest")
    files = entry["evidence"].get("samples_sha256")
    if not isinstance(files, dict) or not isinstance(digest, str):
        raise InputError(str(path), f"{where}.evidence", "needs digest and samples_sha256")
    joined = "\n".join(f"{name} {files[name]}" for name in sorted(files))
    if hashlib.sha256(joined.encode()).hexdigest() != digest:
        raise InputError(str(path), f"{where}.evidence.digest", "does not match its samples' digests")
    if _entry_digest(entry) != entry["entry_sha256"]:
        raise InputError(
            str(path), f"{where}.entry_sha256", "does not match the entry: it was edited after moecal wrote it"
        )
    return entry


def read_entries(path: Path) -> list[JSONObject]:
    """The entries of a file moecal wrote, each validated (InputError naming the first bad field)."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(str(path), "(file)", f"not a readable JSON file: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise InputError(str(path), "format", f"not a {FORMAT} file")
    if not isinstance(document.get("entries"), list):
        raise InputError(str(path), "entries", "missing or not a list")
    return [_check_entry(path, i, entry) for i, entry in enumerate(document["entries"])]


def lookup_tactic(
    entries: Sequence[Mapping[str, object]],
    op: str,
    runner: str,
    device: str,
    architecture: str,
    mlxcel_version: str,
    mlx_commit: str,
) -> tuple[int | None, str]:
    """What a binary with these facts takes: (value, source). The order is device, then architecture; an entry of
    another runner, bucket, dtype, mlxcel version or MLX commit never matches (as TacticRecord::matches); with no
    match, (None, 'backend default'). The MLX commit may be recorded short (same_commit)."""
    for level, key in zip(LEVELS, (device, architecture), strict=True):
        for e in entries:
            if (e["op"], e["runner"], e["level"], e["bucket"], e["dtype"]) != (op, runner, level, BUCKET, DTYPE):
                continue
            if e[level] == key and e["mlxcel_version"] == mlxcel_version and same_commit(e["mlx_commit"], mlx_commit):
                return int(e["tactic"]["params"][0]), level  # type: ignore[index]
    return None, "backend default"


def same_commit(recorded: object, binary: str) -> bool:
    """The binary's MLX commit is the one recorded: equal, or the recorded short hash (≥ 7 hex digits, what a
    --version line prints) a prefix of the binary's full one. An unrecorded commit ('') matches nothing."""
    recorded = str(recorded)
    return bool(recorded) and (recorded == binary or (len(recorded) >= 7 and binary.startswith(recorded)))
