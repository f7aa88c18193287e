"""meta.json's provenance keys in one registry (pyperf's `_metadata.py` pattern): each key moecal writes and later
reads back, with what its value must be. A run's provenance stays an open mapping (harness.runs.run_meta): a key
not listed here (a backend's own fact) is kept and restated as it is. A listed key with a value of the wrong kind
is refused in one line, naming the file and the key, where meta.json is read (RunMeta.from_json) and before it is
written (RunDirectory.write_record): otherwise a hand-edited or damaged file would surface as a traceback, or as a
wrong word in a report, in whichever command first used the value.

The checks accept what moecal's own writers put there, and what an import carries over from a CSV's `# key: value`
header (text: `# cpu_count: 2` imports as "2"), so every run that reads today still reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.errors import InputError

# a run's provenance (meta.json without its format and policy, or a CSV's `# key: value` header): an open mapping of
# key → value, whose listed keys (KEYS) are checked where it is read and before it is written
Provenance = dict[str, object]
Check = Callable[[object], str | None]  # the problem with a value, in words; None when it is fine


def text(value: object) -> str | None:
    return None if isinstance(value, str) else f"{value!r} is not text"


def whole_number(value: object) -> str | None:
    """A count: an int ≥ 0, or its digits as text (a CSV header's)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return None
    if isinstance(value, str) and value.isdigit():
        return None
    return f"{value!r} is not a whole number ≥ 0"


def flag(value: object) -> str | None:
    """true/false, or its Python spelling as text (a CSV header's `# harness_dirty: False`)."""
    return None if isinstance(value, bool) or value in ("True", "False") else f"{value!r} is not true or false"


def text_map(value: object) -> str | None:
    """An object of text values (package versions, environment variables, how each arm is forced)."""
    if isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values()):
        return None
    return f"{_short(value)} is not an object of text values"


def list_map(value: object) -> str | None:
    """An object of lists (a knob sweep's settings per knob)."""
    if isinstance(value, Mapping) and all(isinstance(v, list) for v in value.values()):
        return None
    return f"{_short(value)} is not an object of lists"


def objects(value: object) -> str | None:
    """A list of objects (the run's segments)."""
    if isinstance(value, list) and all(isinstance(v, Mapping) for v in value):
        return None
    return f"{_short(value)} is not a list of objects"


def until_decided_record(value: object) -> str | None:
    """The until-decided loop's record (harness.measure.allocation.Allocation.as_record): an object. Runs written
    before the look level moved to the policy carry it here too; harness.runs.run_meta moves it into the policy, whose
    constructor is its range check (harness.policy.Policy), and names `until_decided.look_confidence` when it fails."""
    return None if isinstance(value, Mapping) else f"{_short(value)} is not an object"


def _short(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


@dataclass(frozen=True)
class ProvenanceKey:
    """One meta.json key: its name, what it records, and the check its value must pass."""

    name: str
    meaning: str
    check: Check


# the keys named in code, so a writer and its readers in other packages cannot drift apart
UNTIL_DECIDED = "until_decided"  # written by harness.measure.allocation, read at the sweep's end
SEGMENTS = "segments"  # harness.runs.rundir
# the library under test of a command run (written by measure/bench_capabilities.py `Capabilities.as_meta`, read by
# the addendum heading): the binary's `--version` text, the commit it was built from, the MLX pin it links
LIBRARY_VERSION = "bench_version"
LIBRARY_COMMIT = "bench_commit"
MLX_PIN = "bench_mlx_pin"
# why the machine that measured had no device of the run's backend (a run labelled cuda on a machine without an
# NVIDIA GPU, e.g. an emulated binary); absent or empty when it had one, and in runs that predate the key
BACKEND_DEVICE_MISSING = "backend_device_missing"
# model → why, each: predicted null by `moecal init` (the config's expect_null, or import-mlxcel --models), measured by
# switch because its family ignores the cap, and measured after all because its fused verification run logged kernel
# calls (written by harness.measure.sweep_loop, read by harness.analysis.decision.decision_facts)
EXPECT_NULL = "expect_null"
CAP_IGNORED = "cap_ignored"
DISPATCH_OVERRIDES = "dispatch_overrides"

KEYS: dict[str, ProvenanceKey] = {
    key.name: key
    for key in (
        ProvenanceKey("date", "when the run started (UTC, ISO 8601)", text),
        ProvenanceKey("host", "the machine's host name", text),
        ProvenanceKey("os", "system, release and architecture", text),
        ProvenanceKey("cpu", "the CPU's name", text),
        ProvenanceKey("cpu_count", "logical CPUs", whole_number),
        ProvenanceKey("backend", "the backend the runs used (cpu, cuda, metal, rocm)", text),
        ProvenanceKey("device", "the device the runs used", text),
        ProvenanceKey("packages", "versions of Python and the libraries that matter", text_map),
        ProvenanceKey("library_pin", "the library under test, as the addendum heading states it", text),
        ProvenanceKey("harness_commit", "moecal's git commit", text),
        ProvenanceKey("harness_dirty", "moecal's checkout had uncommitted changes", flag),
        ProvenanceKey("kernel_source_hash", "one hash over the measured code (harness.runs.provenance)", text),
        ProvenanceKey("launch", "the launch-relevant environment", text_map),
        ProvenanceKey("run_id", "the run directory's id", text),
        ProvenanceKey("config_path", "the sweep config the run was started with", text),
        ProvenanceKey("config_sha256", "the config file's hash (a resumed run must match it)", text),
        ProvenanceKey("config_name", "the config's name", text),
        ProvenanceKey("command", "the command line that started the run", text),
        ProvenanceKey("workload", "the workload kind", text),
        ProvenanceKey("cap_env", "the environment variable that sets the engine's cap", text),
        ProvenanceKey("arms", "how each arm is forced", text_map),
        ProvenanceKey("rounds", "the first pass's rounds", whole_number),
        ProvenanceKey("warmup_runs", "warm-up runs per point", whole_number),
        ProvenanceKey("order", "the order of the arms within a round", text),
        ProvenanceKey("margin_from_null", "the margin is derived from the null arm", flag),
        ProvenanceKey("knobs", "a knob sweep's settings per launch knob", list_map),
        ProvenanceKey("knob_reference", "the knob setting the plain decision is made at", text),
        ProvenanceKey("shell_env", "arm-changing variables the sweep's shell set", text_map),
        ProvenanceKey(SEGMENTS, "one entry per process that appended rows", objects),
        ProvenanceKey(UNTIL_DECIDED, "what the until-decided loop did", until_decided_record),
        ProvenanceKey(LIBRARY_VERSION, "the benchmark binary's --version text", text),
        ProvenanceKey(LIBRARY_COMMIT, "the commit the benchmark binary was built from", text),
        ProvenanceKey(MLX_PIN, "the MLX pin the benchmark binary links", text),
        ProvenanceKey(BACKEND_DEVICE_MISSING, "why the machine had no device of the run's backend", text),
        ProvenanceKey(EXPECT_NULL, "model → why `moecal init` predicted its point null", text_map),
        ProvenanceKey(CAP_IGNORED, "model → why its family ignores the cap (measured by switch)", text_map),
        ProvenanceKey(DISPATCH_OVERRIDES, "model → why it was measured against its prediction", text_map),
    )
}


def check_provenance(provenance: Mapping[str, object], source: str | Path) -> None:
    """InputError (`source`, the key, the problem) for the first listed key whose value fails its check."""
    for name, value in provenance.items():
        key = KEYS.get(name)
        problem = key.check(value) if key is not None else None
        if problem is not None:
            raise InputError(str(source), name, problem)
