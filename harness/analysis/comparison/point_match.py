"""The one rule for matching a point of one run to a point of another: what the point measures, cell by cell.

A point is the same measurement in two runs when its workload, model, quantization (mode, bits, group size), shape
(d_model, Dff, experts, top_k) and activation dtype agree, each cell compared as text (harness.runs.formats.key_text:
missing → "", 2048.0 → "2048", so a summary read from a CSV and one built in memory agree). Machine — backend and
device — is the one choice a caller makes:
- `moecal check` and `report --previous` hold a sweep against its own baseline: another backend or device is another
  experiment, so they match on the machine too (`same_machine=True`) and list the rest as not comparable.
- `moecal compare` asks whether the crossover moved between two runs that may differ in exactly that (another
  library pin, machine or harness commit), so it matches without the machine.

dtype is always part of the match (`moecal compare` once had a rule of its own that left it out): a float32 and a
bfloat16 point run other kernels on other bytes, so their ratios differ for a reason that is not the pin or the
machine; matching them would report the dtype change as drift. Stored runs and published sweeps each hold one dtype
per workload, so no stored comparison changed (the decision snapshot of compare is identical); two runs at different
dtypes now list their points as not compared instead of comparing them.
"""

from __future__ import annotations

import pandas as pd

from harness.runs.formats import POINT_COLUMNS, PointKey, key_text

MACHINE_COLUMNS = ("backend", "device")
MEASURED_COLUMNS = tuple(c for c in POINT_COLUMNS if c not in MACHINE_COLUMNS)


def match_columns(same_machine: bool) -> tuple[str, ...]:
    return tuple(POINT_COLUMNS) if same_machine else MEASURED_COLUMNS


def match_keys(frame: pd.DataFrame, same_machine: bool) -> list[PointKey]:
    """Every row's match key, in row order (a column the frame lacks counts as empty)."""
    columns = list(match_columns(same_machine))
    records = frame.reindex(columns=columns).to_dict("records")
    return [tuple(key_text(r[c]) for c in columns) for r in records]


def comparable_keys(
    baseline: pd.DataFrame, current: pd.DataFrame, same_machine: bool = True
) -> tuple[list[PointKey], list[PointKey]]:
    """Both inputs' match keys, with a column left out (empty on both sides) where one input's format cannot carry
    it: an mlxcel sweep CSV has no d_model, experts, top_k, bits, group size or dtype, and it would otherwise never
    match the run it was exported from (`check --baseline RUN-mlxcel.csv --current RUN`: "incomparable"). A column
    empty in every row of one input says nothing about its points; one that differs where both state it still
    separates them."""
    base_keys, cur_keys = match_keys(baseline, same_machine), match_keys(current, same_machine)
    unstated = [
        i
        for i in range(len(match_columns(same_machine)))
        if all(not k[i] for k in base_keys) or all(not k[i] for k in cur_keys)
    ]
    if not unstated or not base_keys or not cur_keys:
        return base_keys, cur_keys

    def blank(key: PointKey) -> PointKey:
        return tuple("" if i in unstated else cell for i, cell in enumerate(key))

    return [blank(k) for k in base_keys], [blank(k) for k in cur_keys]


def match_points(
    baseline: pd.DataFrame, current: pd.DataFrame, same_machine: bool = True
) -> tuple[list[tuple[int, int]], list[PointKey], list[PointKey]]:
    """Row-position pairs (baseline, current) of matched points, in baseline order, then the keys found only in the
    baseline and only in the current frame (in their order)."""
    base_keys, cur_keys = comparable_keys(baseline, current, same_machine)
    cur_index = {key: i for i, key in enumerate(cur_keys)}
    pairs = [(i, cur_index[key]) for i, key in enumerate(base_keys) if key in cur_index]
    base_set = set(base_keys)
    return pairs, [k for k in base_keys if k not in cur_index], [k for k in cur_keys if k not in base_set]
