"""meta.json as a record: the run's provenance, the statistical policy the sweep measured to, the format version.

- **Provenance** (`RunMeta.provenance`) stays an open mapping of flat facts (date, host, versions, config, launch
  settings, segments, the until-decided record): a backend or workload adds its own facts without a schema change,
  and reports and CSV headers restate them as they are.
- **Policy** (harness.policy.Policy, in meta.json as `policy`: `policy_to_json`, `policy_from_json`): the confidence
  and margin the sweep's own decisions aimed at (until-decided looks, refinement's next Dff), and the look level of
  an until-decided sweep. It is kept apart from the provenance so it is read as a setting, never printed as a fact,
  and so a later analysis of the run can default to the same targets. A run written before policies were recorded
  has none (None): it was measured at the module defaults, which is what an analysis uses for it, as before. Its
  values are range-checked by the Policy's constructor alone; a value it refuses is named by its meta.json field.
- **Format version** (`format`, FORMAT_VERSION): the layout of the directory's files. A meta.json without it (written
  before versions existed, such as the stored CI baseline) is format 0 and goes through the named migrations in
  MIGRATIONS, in memory, on every read: the files on disk are never rewritten by a reader. A newer version than this
  moecal knows is refused in one line, never guessed at. The policy is an optional key that older runs lack and
  every reader tolerates, so it did not need a new version.
- **Look level**: an until-decided sweep's look level is written once, as `policy.look_confidence`, and read through
  the Policy alone (harness.analysis.rounds.run_options.recorded_options), by the sweep's end and every later command.
  Runs written before that also carry it in their `until_decided` record, some only there: a reader moves it into
  the policy (in memory, as a migration would), so an old run reads at the level its looks read and a rewritten
  meta.json holds it once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.errors import InputError
from harness.policy import Policy, PolicyError
from harness.runs.provenance_keys import UNTIL_DECIDED, Provenance, check_provenance

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


def policy_to_json(policy: Policy) -> dict[str, float]:
    """meta.json's `policy` object: confidence and margin, and the look level where there is one."""
    out = {"confidence": policy.confidence, "margin": policy.margin}
    return out if policy.look_confidence is None else {**out, LOOK_KEY: policy.look_confidence}


def _checked(source: Path, where: str, written: Mapping[str, object], build: Callable[[], Policy]) -> Policy:
    """`build()`, whose Policy constructor checks the values; a value it refuses is an InputError naming its
    meta.json field (`where`.name) and the value as written there."""
    try:
        return build()
    except PolicyError as exc:
        raise InputError(str(source), f"{where}.{exc.name}", exc.in_file(written.get(exc.name))) from None


def policy_from_json(data: object, source: Path) -> Policy:
    """From meta.json's `policy` object: anything but numbers in range (confidence and margin required) is an
    InputError naming the field."""
    if not isinstance(data, Mapping):
        raise InputError(str(source), POLICY_KEY, "expected an object with confidence and margin")
    return _checked(
        source,
        POLICY_KEY,
        data,
        lambda: Policy(  # a missing confidence or margin is no number (NaN): refused, named as written (None)
            confidence=data.get("confidence", math.nan),
            margin=data.get("margin", math.nan),
            look_confidence=data.get(LOOK_KEY),
        ),
    )


def with_look_level(policy: Policy | None, level: float) -> Policy:
    """`policy` at the look level `level`; a run that recorded no policy was measured at the module defaults
    (module docstring), which is what its looks read at and so what its policy is."""
    return (policy or Policy()).with_look_level(level)


def _moved_look_level(provenance: Provenance, policy: Policy | None, source: Path) -> Policy | None:
    """The policy with the look level an older run wrote in its `until_decided` record (module docstring), which
    leaves the record; the policy's own level wins where both are written (the same number, written by one sweep).
    The record's level is checked by the Policy constructor too: written there, null is no level (NaN, refused)."""
    record = provenance.get(UNTIL_DECIDED)
    if not isinstance(record, Mapping) or LOOK_KEY not in record:
        return policy
    written = record[LOOK_KEY]
    base = policy or Policy()  # a run that recorded no policy: the module defaults (with_look_level)
    _checked(
        source, UNTIL_DECIDED, record, lambda: replace(base, look_confidence=math.nan if written is None else written)
    )
    provenance[UNTIL_DECIDED] = {k: v for k, v in record.items() if k != LOOK_KEY}
    if policy is not None and policy.look_confidence is not None:
        return policy
    return base.with_look_level(float(written))


@dataclass(kw_only=True)
class RunMeta:
    """One run's meta.json (module docstring): `provenance` without the format and policy keys, `policy` or None."""

    provenance: Provenance = field(default_factory=dict)
    policy: Policy | None = None

    def to_json(self) -> dict[str, object]:
        """The file's object: `format` first, then the provenance, then the policy when there is one."""
        body = {k: v for k, v in self.provenance.items() if k not in (FORMAT_KEY, POLICY_KEY)}
        policy = {POLICY_KEY: policy_to_json(self.policy)} if self.policy is not None else {}
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
        policy = policy_from_json(migrated[POLICY_KEY], source) if POLICY_KEY in migrated else None
        return cls(provenance=provenance, policy=_moved_look_level(provenance, policy, source))
