"""What mlxcel's `mlxcel-bench-decode` prints, parsed: token counts, the fused kernel's parity probe, usage errors.

The formats are mlxcel's own (public source): `GenerationStats::print` in src/lib/mlxcel-core/src/generate.rs
prints `  Generated tokens: N` beside the `Decode: X ms (Y tok/s)` line the metric regex reads; the in-kernel parity
probe (src/lib/mlxcel-core/cpp/mlx_cxx_kernels.cpp, MLXCEL_FUSED_MOE_PARITY_CHECK=1) writes to stderr, per call
above its threshold,

    [fused-moe-parity] call N: fused-vs-ref=… fused-vs-truth=… ref-vs-truth=… ref_rms=… truth_rms=…
        (act=… k=… din=… dff=…)            (one line)

and every 5000 calls a summary line `[fused-moe-parity] N calls: worst fused-vs-truth=… …`; clap rejects an unknown
flag with `error: unexpected argument '--x' found` and exit code 2. Parsing lives here, apart from the process
running (harness.measure.workloads.command), so the verification pass and the timed runs read output the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GENERATED_TOKENS = re.compile(r"^\s*Generated tokens:\s*(\d+)\s*$", re.MULTILINE)
_NUMBER = r"([-+0-9.eE]+|nan|inf)"
PARITY_CALL = re.compile(
    r"\[fused-moe-parity\] call (\d+): fused-vs-ref=" + _NUMBER + r" fused-vs-truth=" + _NUMBER
    + r" ref-vs-truth=" + _NUMBER + r" ref_rms=" + _NUMBER + r" truth_rms=" + _NUMBER
    + r" \(act=(\d+) k=(\d+) din=(\d+) dff=(\d+)\)"
)  # fmt: skip
PARITY_SUMMARY = re.compile(r"\[fused-moe-parity\] (\d+) calls: worst fused-vs-truth=" + _NUMBER)
USAGE_ERROR = re.compile(r"error: (unexpected argument '([^']+)' found|.*)")
# lines today's binary adds (2026-10); read as free text, whatever follows the label, and never required: an older
# binary prints neither, and any other unknown line is ignored as every line but the ones above always was
DECODE_PATH = re.compile(r"^\s*Decode path:\s*(.+?)\s*$", re.MULTILINE)
MEMORY_LINE = re.compile(r"^\s*\[Memory\]\s*(.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class ParityCall:
    """One fused-kernel call the probe logged: normalized RMS errors of the fused output against mlxcel's
    gather_qmm reference and against an all-f32 truth, and the call's shape."""

    call: int
    fused_vs_ref: float
    fused_vs_truth: float
    ref_vs_truth: float
    dff: int
    din: int
    k: int


def generated_tokens(output: str) -> int | None:
    """The measured pass's generated token count (the last `Generated tokens: N`); None when not printed."""
    found = GENERATED_TOKENS.findall(output)
    return int(found[-1]) if found else None


def decode_path(output: str) -> str | None:
    """What the binary's last `Decode path: …` line says (None when it prints none)."""
    found = DECODE_PATH.findall(output)
    return found[-1] if found else None


def memory_lines(output: str) -> list[str]:
    """The text of every `[Memory] …` line, in order."""
    return MEMORY_LINE.findall(output)


def parity_calls(output: str) -> list[ParityCall]:
    """Every per-call probe line in a run's output, in order."""
    return [
        ParityCall(int(m[1]), float(m[2]), float(m[3]), float(m[4]), dff=int(m[10]), din=int(m[9]), k=int(m[8]))
        for m in PARITY_CALL.finditer(output)
    ]


def probe_summaries(output: str) -> int:
    """How many calls the probe's periodic summary lines account for (0 when none was printed): a probe that ran
    with a threshold above every call's error prints no per-call line but still counts the calls every 5000."""
    counts = [int(m[1]) for m in PARITY_SUMMARY.finditer(output)]
    return max(counts, default=0)


def usage_error(output: str) -> str | None:
    """The usage complaint of a command-line parser that rejected its arguments (clap: `error: unexpected argument
    '--x' found`), as one line; None when the output holds none."""
    for line in output.splitlines():
        match = USAGE_ERROR.search(line)
        if match:
            return match.group(0).strip()
    return None


def rejected_flag(message: str) -> str | None:
    """The flag clap names in an `unexpected argument` error, if that is the complaint."""
    match = USAGE_ERROR.search(message)
    return match.group(2) if match and match.group(2) else None
