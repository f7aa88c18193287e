"""meta.json as a record: the run's provenance, the statistical policy the sweep measured to, the format version.

- **Provenance** (`RunMeta.provenance`) stays an open mapping of flat facts (date, host, versions, config, launch
  settings, segments, the until-decided record): a backend or workload adds its own facts without a schema change,
  and reports and CSV headers restate them as they are.
- **Policy** (`RunPolicy`): the confidence and margin the sweep's own decisions aimed at (until-decided looks,
  refinement's next Dff), and the look level of an until-decided sweep. It is kept apart from the provenance so it
  is read as a setting, never printed as a fact, and so a later analysis of the run can default to the same targets.
  A run written before policies were recorded has none (None): it was measured at the module defaults, which is what
  an analysis uses for it, as before.
- **Format version** (`format`, FORMAT_VERSION): the layout of the directory's files. A meta.json without it (written
  before versions existed, such as the stored CI baseline) is format 0 and goes through the named migrations in
  MIGRATIONS, in memory, on every read: the files on disk are never rewritten by a reader. A newer version than this
  moecal knows is refused in one line, never guessed at. The policy is an optional key that older runs lack and
  every reader tolerates, so it did not need a new version.
- **Look level**: an until-decided sweep's look level is written once, as `policy.look_confidence`, and read through
  RunPolicy alone (harness.analysis.rounds.run_options.policy_options), by the sweep's end and every later command.
  Runs written before that also carry it in their `until_decided` record, some only there: a reader moves it into
  the policy (in memory, as a migration would), so an old run reads at the level its looks read and a rewritten
  meta.json holds it once.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import InputError
from harness.runs.provenance_keys import UNTIL_DECIDED, Provenance, check_provenance
from harness.thresholds import CONFIDENCE, CONFIDENCE_RANGE, MARGIN, MARGIN_RANGE, in_range

FORMAT_KEY = "format"
FORMAT_VERSION = 1  # 1: meta.json carries `format`; the files are laid out as in format 0
POLICY_KEY = "policy"
LOOK_KEY = "look_confidence"  # in `policy`; in the `until_decided` record too in runs written before it was moved


def migrate_v0_to_v1(meta: dict[str, object]) -> dict[str, object]:
    """Format 0 (no `format` key: every run before versions existed, the stored CI baseline among them) → 1.

    Format 1 only started naming its version: the files' layout and meta.json's keys are those of format 0
    (a run from before segments existed is still described by its top level, see harness.runs.rundir.segments), so
    nothing is converted. The next change of layout adds its own function to MIGRATIONS."""
    return {**meta, FORMAT_KEY: 1}


MIGRATIONS: dict[int, Callable[[dict[str, object]], dict[str, object]]] = {0: migrate_v0_to_v1}  # from → from + 1


def migrate_meta(meta: dict[str, object], source: Path) -> dict[str, object]:
    """meta.json brought to FORMAT_VERSION through MIGRATIONS, one version at a time; a version this moecal does
    not know (newer, or not a whole number) is an InputError in one line: guessing at its files could misread them."""
    version = meta.get(FORMAT_KEY, 0)
    if type(version) is not int or not 0 <= version <= FORMAT_VERSION:
        raise InputError(
            str(source), FORMAT_KEY, f"run format {version!r} is not one this moecal reads (up to {FORMAT_VERSION})"
        )
    while version < FORMAT_VERSION:
        meta = MIGRATIONS[version](meta)
        version += 1
    return meta


@dataclass(frozen=True)
class RunPolicy:
    """The targets a sweep's own decisions were read at: `confidence` and `margin` (the config's `measure:`), and
    `look_confidence`, the level each until-decided look read the decision at (None: not an until-decided sweep)."""

    confidence: float
    margin: float
    look_confidence: float | None = None

    def to_json(self) -> dict[str, float]:
        out = {"confidence": self.confidence, "margin": self.margin}
        return out if self.look_confidence is None else {**out, LOOK_KEY: self.look_confidence}

    @classmethod
    def from_json(cls, data: object, source: Path) -> RunPolicy:
        """From meta.json's `policy` object; anything but numbers in range is an InputError naming the field."""
        if not isinstance(data, Mapping):
            raise InputError(str(source), POLICY_KEY, "expected an object with confidence and margin")
        values: dict[str, float | None] = {}
        for name, (low, high), required in (
            ("confidence", CONFIDENCE_RANGE, True),
            ("margin", MARGIN_RANGE, True),
            (LOOK_KEY, CONFIDENCE_RANGE, False),
        ):
            value = data.get(name)
            if value is None and not required:
                values[name] = None
                continue
            if not in_range(value, (low, high)):
                raise InputError(str(source), f"{POLICY_KEY}.{name}", f"{value!r} is not a number in [{low}, {high})")
            values[name] = float(value)
        return cls(values["confidence"], values["margin"], values[LOOK_KEY])  # type: ignore[arg-type]

    def at_look_level(self, level: float) -> RunPolicy:
        """This policy with an until-decided sweep's look level (rounded as meta.json stores it)."""
        return dataclasses.replace(self, look_confidence=round(level, 6))


def with_look_level(policy: RunPolicy | None, level: float) -> RunPolicy:
    """`policy` at the look level `level`; a run that recorded no policy was measured at the module defaults
    (module docstring), which is what its looks read at and so what its policy is."""
    return (policy or RunPolicy(CONFIDENCE, MARGIN)).at_look_level(level)


def _moved_look_level(provenance: Provenance, policy: RunPolicy | None) -> RunPolicy | None:
    """The policy with the look level an older run wrote in its `until_decided` record (module docstring), which
    leaves the record; the policy's own level wins where both are written (the same number, written by one sweep)."""
    record = provenance.get(UNTIL_DECIDED)
    if not isinstance(record, Mapping) or LOOK_KEY not in record:
        return policy
    provenance[UNTIL_DECIDED] = {k: v for k, v in record.items() if k != LOOK_KEY}
    if policy is not None and policy.look_confidence is not None:
        return policy
    return with_look_level(policy, float(record[LOOK_KEY]))


@dataclass
class RunMeta:
    """One run's meta.json (module docstring): `provenance` without the format and policy keys, `policy` or None."""

    provenance: Provenance = field(default_factory=dict)
    policy: RunPolicy | None = None

    def to_json(self) -> dict[str, object]:
        """The file's object: `format` first, then the provenance, then the policy when there is one."""
        body = {k: v for k, v in self.provenance.items() if k not in (FORMAT_KEY, POLICY_KEY)}
        policy = {POLICY_KEY: self.policy.to_json()} if self.policy is not None else {}
        return {FORMAT_KEY: FORMAT_VERSION, **body, **policy}

    def to_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, default=str) + "\n"

    @classmethod
    def from_json(cls, data: dict[str, object], source: Path) -> RunMeta:
        """From the file's object, migrated to FORMAT_VERSION (see migrate_meta); a provenance value of the wrong
        kind is an InputError naming its key (harness.runs.provenance_keys)."""
        migrated = migrate_meta(data, source)
        provenance = {k: v for k, v in migrated.items() if k not in (FORMAT_KEY, POLICY_KEY)}
        check_provenance(provenance, source)
        policy = RunPolicy.from_json(migrated[POLICY_KEY], source) if POLICY_KEY in migrated else None
        return cls(provenance, _moved_look_level(provenance, policy))
