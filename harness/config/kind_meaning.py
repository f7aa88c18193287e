"""What a workload kind's numbers mean downstream of the measurement: the unit, the plot panel, whether its points
are whole-model decodes (the points mlxcel's per-model sweep layout carries), whether its families decide the cap
over other kinds', which library is under test, and which point fields make up one shape family.

Every kind states this in its registry entry (harness.config.schema `KINDS`, `WorkloadKind.meaning`), so the
analysis and the report ask a kind's meaning instead of comparing its name with "layer" or "command": a new kind is
reported in its own unit, under its own library, by adding its entry. Kept in its own module (no import of the
schema) because the schema's registry holds these records.
"""

from __future__ import annotations

from dataclasses import dataclass

WHOLE_MODEL_FAMILY = ("workload",)  # one family per kind: its points are whole models, one per Dff


@dataclass(frozen=True)
class KindMeaning:
    """The meaning of one workload kind's measurements (see the module docstring)."""

    unit: str  # what one timed run's throughput counts: `tok/s`, `layer steps/s`
    panel: str  # the plot's panel for its points, unit included
    whole_model: bool  # a whole-model decode per point: exported in mlxcel's sweep layout (the mlxcel CSV)
    # its families decide the cap over those of kinds that do not when a run has both (a layer config's decode block
    # only reports); a run of one kind is decided by that kind either way
    decides_cap: bool = False
    # the packages under test: None for the backend's array libraries (numba, CuPy, MLX: the backend registry's),
    # () for an external program (its own version and commit, as the sweep recorded them)
    libraries: tuple[str, ...] | None = None
    family_fields: tuple[str, ...] = WHOLE_MODEL_FAMILY  # the point fields one shape family shares
    description: str | None = None  # the addendum's "Harness:" words for a built-in kind (None: the run says)
    family_words: str | None = None  # how a report names a whole-model family of this kind (None: its label)

    @property
    def external(self) -> bool:
        """An external program is under test (its build, not a Python package, is the library)."""
        return self.libraries == ()


# what a kind name no registry entry knows means (data of an older or unknown kind): a whole-model decode in tok/s,
# as every kind but `layer` has always been reported
UNKNOWN = KindMeaning(unit="tok/s", panel="whole model (tok/s)", whole_model=True)
