"""The fleet report: one markdown table over every entry of a `moecal fleet` run (class, machine, device, rows,
decision, addendum), written beside the entries' run directories."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from harness.measure.fleet_run import EntryResult
from harness.runs.formats import write_text_atomic


def fleet_report(results: list[EntryResult], fleet_path: Path, out: Path) -> Path:
    """`<out>/fleet-report.md`: one table over every entry (class, machine, device, rows, decision, addendum)."""
    lines = [
        f"### {_dt.date.today().isoformat()} fleet report: {fleet_path.stem}",
        "",
        f"Fleet file `{fleet_path}`; one run directory per entry under `{out}`, each with the provenance of the "
        "machine that measured it and its own addendum.",
        "",
        "| entry | class | host | backend | device | ok | fail | skip | decision | cap | addendum |",
        "|---|---|---|---|---|--:|--:|--:|---|--:|---|",
    ]
    for r in results:
        c = r.counts
        decision = r.action or (f"error: {r.error}" if r.error else "no ok rows")
        addendum = str(r.addendum.relative_to(out)) if r.addendum else "-"
        cap = "" if r.recommended_cap is None else str(r.recommended_cap)
        lines.append(
            f"| {r.entry.name} | {r.entry.label} | {r.host} | {r.backend} | {r.device} | {c.get('ok', 0)} | "
            f"{c.get('fail', 0)} | {c.get('skip', 0)} | {decision} | {cap} | {addendum} |"
        )
    return write_text_atomic(out / "fleet-report.md", "\n".join(lines) + "\n")  # never through a link
