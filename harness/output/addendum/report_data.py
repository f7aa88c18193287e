"""The report data: every number and provenance string an addendum states, as one typed record.

`harness.output.addendum.report_build` builds it from the raw data, `harness.output.addendum.addendum_markdown` and
`harness.output.plots.addendum_plot` render it, `harness.output.report_files` writes it beside the addendum as the
sidecar `<run-id>.json` (`to_json`: the sidecar's bytes are the record's JSON, key for key), and
`harness.output.report_check` reads it back (`from_json`) to re-render and re-derive it. The decision inside it
stays the decision engine's JSON record (harness.analysis.decision.decide), read through its keys.

Sidecars written before `overrides`, `link_base` and `files.raw_name` were recorded still read (their old defaults;
check-reports then reports the keys missing against a fresh record, as it did).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal, NotRequired, TypedDict, get_args

from harness.analysis.comparison.knobs import KnobsJSON
from harness.analysis.comparison.two_runs import ComparisonJSON
from harness.analysis.decision.decision_facts import CapWords
from harness.analysis.decision.decision_json import DecisionJSON, OptionsJSON
from harness.analysis.decision.pipeline import Options
from harness.json_input import JSONObject, load_json_object
from harness.output.mlxcel_source import MlxcelTreeJSON


class PreviousPointJSON(TypedDict):
    model: str
    dff: int
    ratio_before: float | None
    ratio_now: float | None
    verdict_before: str
    verdict_now: str


class PreviousJSON(TypedDict):
    """The comparison with an earlier run (report_build --previous): its crossover and decision, each point's
    estimate before and now, and the crossover shift with its interval (harness.analysis.comparison.two_runs, as
    `compare`)."""

    raw_data: str
    date: str
    library_pin: str
    crossover_dff: float | None
    ci_low: float | None
    ci_high: float | None
    outcome: str
    recommended_cap: int | None
    action: str
    points: list[PreviousPointJSON]
    not_compared: int
    comparison: ComparisonJSON


# the recorded provenance strings an addendum shows, copied from the run's provenance as text
# (addendum_heading.context), in this order in the sidecar; bench_version, bench_commit, bench_mlx_pin: the build of
# the library under test (harness.runs.provenance_keys LIBRARY_VERSION, LIBRARY_COMMIT, MLX_PIN)
ContextText = Literal[
    "run_id",
    "workload",
    "hardware",
    "device",
    "os",
    "cpu",
    "gpu",
    "driver",
    "cuda",
    "harness_commit",
    "harness_dirty",
    "config_path",
    "config_sha256",
    "command",
    "bench_command",
    "bench_description",
    "source_format",
    "notes",
    "order",
    "current_default_source",
    "bench_version",
    "bench_commit",
    "bench_mlx_pin",
]
CONTEXT_KEYS: tuple[ContextText, ...] = get_args(ContextText)


class ReportContext(CapWords, total=False):
    """The provenance an addendum shows (harness.output.addendum.addendum_heading.context), every key optional (a
    run records what it knows): the CONTEXT_KEYS as text, shown paths made relative; `device_note` when the run's
    label names a device its machine lacked; how each arm was forced, the packages that ran and the synthetic
    checkpoints, name → text; and where the cap in force came from, or what is missing (CapWords).
    """

    run_id: str
    workload: str
    hardware: str
    device: str
    os: str
    cpu: str
    gpu: str
    driver: str
    cuda: str
    harness_commit: str
    harness_dirty: str  # "True" / "False"
    config_path: str
    config_sha256: str
    command: str
    bench_command: str
    bench_description: str
    source_format: str
    notes: str
    order: str
    bench_version: str
    bench_commit: str
    bench_mlx_pin: str
    device_note: str
    arms: dict[str, str]
    packages: dict[str, str]
    synthetic: dict[str, str]


REPORT_FORMAT = 3  # 3: sidecar record, design-doc style text, mlxcel CSV and patch beside it
ADDENDUM_SUFFIX = "-dff-crossover.md"


@dataclass(frozen=True)
class ReportFiles:
    """The addendum's links, as seen from its link base: the files written beside it (None: not written) and the
    raw data (None when it lies outside the link base's project; `raw_name` then names it without a link)."""

    addendum: str
    plot: str
    sidecar: str
    mlxcel_csv: str | None
    patch: str | None
    raw_data: str | None
    raw_name: str

    def written(self) -> dict[str, str]:
        """Name → link of each file the report writes beside the addendum (not the raw data it links to)."""
        return {name: link for name, link in self.to_json().items() if link and not name.startswith("raw_")}

    def to_json(self) -> dict[str, str | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: JSONObject) -> ReportFiles:
        """The links of a sidecar; one written before `raw_name` was recorded reads with it empty (its text names
        the raw data by its link)."""
        return cls(
            **{f.name: data[f.name] for f in fields(cls) if f.name != "raw_name"}, raw_name=data.get("raw_name", "")
        )


# meta.json's `until_decided` record as the run stored it (harness.measure.allocation.UntilDecidedJSON, as the moecal
# that measured it wrote it: older runs' keys differ): the report carries it into the sidecar unread
StoppedRecord = Mapping[str, object]


class CapSourceJSON(TypedDict, total=False):
    cap_source: str


class ReportOptionsJSON(OptionsJSON, CapSourceJSON):
    """The sidecar's `options`: the analysis settings, the cap in force and, when neither the config nor the
    command line gave it, where it came from (`cap_source`)."""

    current_default: int | None


class SidecarJSON(TypedDict):
    """The sidecar (ReportData.to_json), in its key order; the last four only where the report has them."""

    moecal_report: int
    date: str
    host: str
    backend: str
    library_pin: str
    raw_data: str
    overrides: dict[str, str]
    link_base: str
    options: ReportOptionsJSON
    files: dict[str, str | None]
    context: ReportContext
    mlxcel: MlxcelTreeJSON | None
    decision: DecisionJSON
    previous: PreviousJSON | None
    until_decided: NotRequired[StoppedRecord]
    table_wrong: NotRequired[dict[str, str]]
    run_notes: NotRequired[list[str]]
    knobs: NotRequired[KnobsJSON]


@dataclass(frozen=True)
class ReportData:
    """One addendum's record (module docstring). `until_decided` (how an until-decided sweep stopped),
    `table_wrong` (where the dispatch pass proved the family table wrong) and `knobs` (a knob sweep's joint
    recommendation) are left out of the JSON when empty."""

    date: str
    host: str
    backend: str
    library_pin: str
    raw_data: str  # relative to the project root
    options: Options  # the analysis settings, current default included, so the record can be re-derived
    files: ReportFiles
    context: ReportContext
    mlxcel: MlxcelTreeJSON | None  # the tree the decision targets (None: not an mlxcel backend)
    decision: DecisionJSON  # harness.analysis.decision.decision_record.decision_json
    previous: PreviousJSON | None  # the comparison with an earlier run (harness.output.addendum.report_build)
    overrides: dict[str, str] = field(default_factory=dict)
    link_base: str = "."
    until_decided: StoppedRecord | None = None
    table_wrong: dict[str, str] | None = None
    run_notes: list[str] = field(default_factory=list)  # how the run was taken (harness.output.addendum.run_findings)
    knobs: KnobsJSON | None = None  # a knob sweep's joint recommendation and rows (KnobResult.record)
    format: int = REPORT_FORMAT

    def to_json(self) -> SidecarJSON:
        """The sidecar's JSON object, in its key order."""
        # where that cap came from when not the command line (the --mlxcel-src tree): the addendum says it
        sourced = self.options.cap_source != Options.cap_source
        source: CapSourceJSON = {"cap_source": self.options.cap_source} if sourced else {}
        options: ReportOptionsJSON = {
            **self.options.settings(),
            "current_default": self.options.current_default,
            **source,
        }
        out: SidecarJSON = {
            "moecal_report": self.format,
            "date": self.date,
            "host": self.host,
            "backend": self.backend,
            "library_pin": self.library_pin,
            "raw_data": self.raw_data,
            "overrides": self.overrides,
            "link_base": self.link_base,
            "options": options,
            "files": self.files.to_json(),
            "context": self.context,
            "mlxcel": self.mlxcel,
            "decision": self.decision,
            "previous": self.previous,
        }
        if self.until_decided:
            out["until_decided"] = self.until_decided
        if self.table_wrong:
            out["table_wrong"] = self.table_wrong
        if self.run_notes:
            out["run_notes"] = self.run_notes
        if self.knobs:
            out["knobs"] = self.knobs
        return out

    @classmethod
    def from_json(cls, data: JSONObject) -> ReportData:
        """A sidecar's record; KeyError or TypeError when a field it needs is missing or of the wrong kind."""
        return cls(
            date=str(data["date"]),
            host=str(data["host"]),
            backend=str(data["backend"]),
            library_pin=str(data["library_pin"]),
            raw_data=str(data["raw_data"]),
            options=Options.from_settings(data["options"]),
            files=ReportFiles.from_json(data["files"]),
            context=ReportContext(**(data["context"] or {})),
            mlxcel=data.get("mlxcel"),
            decision=data["decision"],
            previous=data["previous"],
            overrides=dict(data.get("overrides") or {}),
            link_base=str(data.get("link_base", ".")),
            until_decided=data.get("until_decided"),
            table_wrong=data.get("table_wrong"),
            run_notes=[str(n) for n in data.get("run_notes") or []],
            knobs=data.get("knobs"),
            format=data["moecal_report"],
        )


def sidecar_path(md_path: Path) -> Path:
    """`<run-id>.json` beside `<run-id>-dff-crossover.md`."""
    return md_path.with_name(md_path.name.removesuffix(ADDENDUM_SUFFIX) + ".json")


def read_sidecar(md_path: Path) -> JSONObject | None:
    """The addendum's record as stored (JSON), None when it has none (not a moecal addendum of this format)."""
    path = sidecar_path(md_path)
    if not md_path.name.endswith(ADDENDUM_SUFFIX) or not path.is_file():
        return None
    data = load_json_object(path)  # nested too deep, not JSON, not UTF-8: an InputError naming the file
    return data if "moecal_report" in data else None
