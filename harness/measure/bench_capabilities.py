"""What a decode benchmark binary can do, read from its own `--help` (and `--version` when it has one).

mlxcel's `mlxcel-bench-decode` kept growing after July: today's accepts `--ignore-eos` (and `--temperature`,
`--top-p`), and the maintainers' sweeps now run a fixed token budget with it (`-n 128 --ignore-eos`, PR #1888's
report). Which protocol a calibration can run therefore depends on the binary in hand, not on a date: with
`--ignore-eos` both arms generate exactly `-n` tokens (equal work); without it, the July protocol (greedy decoding
that stops at EOS, each arm's token count recorded). The answer is read once per binary — keyed by its resolved path
and modification time, so a rebuilt binary is read again — and bounded in time: a binary that never answers
`--help` costs at most HELP_TIMEOUT_S and is reported unusable instead of hanging `init` or a sweep.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harness.measure.proc import HELP_TIMEOUT_S, run_with_deadline
from harness.runs.provenance_keys import LIBRARY_COMMIT, LIBRARY_VERSION, MLX_PIN, Provenance

FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
_COMMIT = re.compile(r"\b(?:commit|mlxcel)[ :=]+([0-9a-f]{7,40})\b", re.IGNORECASE)
_MLX = re.compile(r"\bMLX(?: pin)?[ :=]+v?([0-9A-Za-z._-]+)")
IGNORE_EOS = "--ignore-eos"
# bench_decode.sh's shape today: a synthesized `--prompt-tokens N` context, a fixed budget, a discarded warm-up
TODAY_FLAGS = ("--prompt-tokens", "--warmup-tokens", IGNORE_EOS)


@dataclass(frozen=True)
class Capabilities:
    """The flags a binary's `--help` lists and what its `--version` says (empty when it has none)."""

    program: str
    usable: bool
    flags: frozenset[str] = field(default_factory=frozenset)
    version: str = ""
    commit: str = ""
    mlx_pin: str = ""
    problem: str = ""  # why it is not usable

    def has(self, flag: str) -> bool:
        return flag in self.flags

    @property
    def fixed_budget(self) -> bool:
        """Whether both arms can be made to generate exactly `-n` tokens (`--ignore-eos`)."""
        return self.has(IGNORE_EOS)

    @property
    def todays_shape(self) -> bool:
        """Whether the binary offers every flag of bench_decode.sh's shape today (`--prompt-tokens 512 -n 128
        --warmup-tokens 20 --ignore-eos`): a context of a chosen depth with equal work in both arms."""
        return all(self.has(flag) for flag in TODAY_FLAGS)

    def as_meta(self) -> Provenance:
        """What meta.json records of the binary (key names documented in docs/mlxcel.md)."""
        return {
            LIBRARY_VERSION: self.version,
            LIBRARY_COMMIT: self.commit,
            MLX_PIN: self.mlx_pin,
            "bench_protocol": "synthesized context, fixed budget (--prompt-tokens, --ignore-eos)"
            if self.todays_shape
            else "fixed budget (--ignore-eos)"
            if self.fixed_budget
            else "stop at EOS (July protocol)",
            "bench_flags": sorted(self.flags),
        }


def leading_args(argv: list[str]) -> tuple[str, ...]:
    """The arguments of a config's command line that belong to the program rather than to one run: those before the
    first `{placeholder}`, up to the last that names a file (`python -I bench.py -m {model_path} …` → `-I
    bench.py`; a plain binary has none)."""
    before = []
    for arg in argv[1:]:
        if "{" in arg:
            break
        before.append(arg)
    files = [i for i, arg in enumerate(before) if Path(arg).is_file()]
    return tuple(before[: files[-1] + 1]) if files else ()


_CACHE: dict[tuple[str, tuple[int, ...]], Capabilities] = {}


def resolve(program: str) -> Path | None:
    """The executable a command's first word names (PATH searched for a bare name), or None."""
    found = program if (os.sep in program or (os.altsep and os.altsep in program)) else shutil.which(program)
    path = Path(found) if found else None
    return path.resolve() if path and path.is_file() and os.access(path, os.X_OK) else None


def capabilities(program: str, leading: tuple[str, ...] = (), timeout_s: float = HELP_TIMEOUT_S) -> Capabilities:
    """The binary's capabilities (cached per resolved path and mtime). `leading` are arguments that come before
    any flag (e.g. an interpreter's script), part of the cache key."""
    path = resolve(program)
    if path is None:
        return Capabilities(program, False, problem=f"{program!r} is not found or not executable")
    files = [path, *(Path(a) for a in leading if Path(a).is_file())]  # a script run by an interpreter counts too
    key = (" ".join((str(path), *leading)), tuple(f.stat().st_mtime_ns for f in files))
    if key not in _CACHE:
        _CACHE[key] = _read(program, [str(path), *leading], timeout_s)
    return _CACHE[key]


def _ask(argv: list[str], timeout_s: float) -> tuple[str | None, str]:
    """(output, problem): the text a flag query printed, or None with why not."""
    try:
        done = run_with_deadline(argv, os.environ, timeout_s)
    except OSError as exc:
        return None, f"cannot start: {exc.strerror or exc}"
    if done.timed_out:
        return None, f"did not answer {argv[-1]} within {timeout_s:g}s"
    if done.returncode != 0:
        return None, f"{argv[-1]} exited {done.returncode}"
    return done.stdout + "\n" + done.stderr, ""


def _read(program: str, argv: list[str], timeout_s: float) -> Capabilities:
    text, problem = _ask([*argv, "--help"], timeout_s)
    if text is None:
        return Capabilities(program, False, problem=f"{program}: {problem}; moecal cannot learn its flags")
    flags = frozenset(FLAG.findall(text))
    version = commit = mlx = ""
    if "--version" in flags:
        answer, _ = _ask([*argv, "--version"], timeout_s)
        version = (answer or "").strip().splitlines()[0] if (answer or "").strip() else ""
        found_commit, found_mlx = _COMMIT.search(answer or ""), _MLX.search(answer or "")
        commit = found_commit.group(1) if found_commit else ""
        mlx = found_mlx.group(1) if found_mlx else ""
    return Capabilities(program, True, flags, version, commit, mlx)
