"""Replication before a default moves: a raise or lower decided by one session is a proposal; it is confirmed only
when a second session of the same device class decides the same move on its own.

llama.cpp's threshold changes carry "an independent run on a second host" before they merge (ggml-org/llama.cpp
#28613, as issue 37 cites it), and mlxcel's own SGY change rested on a single contended session that decided only
"indicatively" (PR #2098). Here a session is one run directory, a device class is a (backend, device) pair — the unit
`moecal report RUN…` never pools across — and each run is analysed alone under the same resolver (the shared
pipeline). A backend's move is replicated when, in some device class, at least two sessions each decide that move
and no session of the backend decides the opposite way; otherwise it stays a proposal, and the report says which
session differs. The switch_layers.rs patch is written for replicated moves only, unless `--unreplicated`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.analysis.comparison.backend_defaults import Defaults, RunResult

MOVES = ("raise", "lower", "set")


@dataclass(frozen=True, kw_only=True)
class Replication:
    backend: str
    action: str  # the backend's move
    replicated: bool
    agreeing: tuple[str, ...]  # sessions (run directory names) that decide this move on their own
    differing: tuple[str, ...]  # "run: its action" of the sessions that do not
    device_class: str = ""  # the class two agreeing sessions share ("" when none does)

    def words(self) -> str:
        if self.action not in MOVES:
            return "no move to replicate"
        if self.replicated:
            return (
                f"replicated: yes in {self.device_class} ({len(self.agreeing)} sessions agree: "
                f"{', '.join(self.agreeing)})"
            )
        why = f"; differs: {', '.join(self.differing)}" if self.differing else "; a second session is needed"
        return f"replicated: no (a proposal from {', '.join(self.agreeing) or 'no single session'}{why})"


def _direction(action: str, recommended: int | None, current: int | None) -> str:
    if action != "set" or recommended is None or current is None:
        return action
    return "keep" if recommended == current else "raise" if recommended > current else "lower"


ClassOf = Callable[[RunResult], str | None]  # a run's device class; None: no known class


def replication(defaults: Defaults, class_of: ClassOf) -> dict[str, Replication]:
    """Per backend: whether its move is replicated across sessions of one device class (`class_of`: a run's class,
    None for a run of no known class, which shares a class with no other). The caller passes the device-class
    table's own (harness.output.defaults.device_defaults.run_class), so a replicated class is a row of that table:
    no default of its own, which named classes the table did not."""
    out = {}
    for row in defaults.backends:
        move = _direction(row.action, row.recommended, row.current)
        runs = [r for r in defaults.runs if r.backend == row.backend]
        decided = {
            r.path.name: (
                class_of(r),
                _direction(
                    r.analysis.result.decision.action,
                    r.analysis.result.decision.recommended_cap,
                    row.current,
                ),
            )
            for r in runs
        }
        agreeing = tuple(name for name, (_, d) in decided.items() if d == move)
        differing = tuple(f"{name}: {d}" for name, (_, d) in decided.items() if d != move)
        opposite = any(d in ("raise", "lower") and d != move for _, d in decided.values())
        per_class: dict[str, int] = {}
        for name in agreeing:
            cls = decided[name][0]
            if cls is not None:
                per_class[cls] = per_class.get(cls, 0) + 1
        shared = next((c for c, n in per_class.items() if n >= 2), "")
        replicated = move in MOVES and not opposite and bool(shared)
        out[row.backend] = Replication(
            backend=row.backend,
            action=move,
            replicated=replicated,
            agreeing=agreeing,
            differing=differing,
            device_class=shared if replicated else "",
        )
    return out


def replicated_caps(
    defaults: Defaults,
    changed: dict[str, int],
    unreplicated: bool,
    class_of: ClassOf,
) -> dict[str, int]:
    """The changed caps a patch may carry: the replicated moves only, every move with `unreplicated`."""
    if unreplicated:
        return changed
    confirmed = replication(defaults, class_of)
    return {b: cap for b, cap in changed.items() if confirmed.get(b) is not None and confirmed[b].replicated}
