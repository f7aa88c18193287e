"""What a decided cap is applied to: the engine under test and the environment variable that sets its cap
(mlxcel's `MLXCEL_FUSED_MOE_MAX_DFF` for a command run of mlxcel or an mlxcel CSV; none for moecal's own kernels).

Why its own value: the decision engine decides a number and never needs the variable; only the line a person
pastes (`MLXCEL_FUSED_MOE_MAX_DFF=8192`) does. The run records the variable (the command workload's `cap_env`), the
analysis reads it once into a CapTarget, and the line is formatted here, by the target, and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from harness.config.schema import DEFAULT_CAP_ENV, KINDS


@dataclass(frozen=True, kw_only=True)
class CapTarget:
    """`env`: the variable that sets the cap of what was measured ('' when no variable of any library does)."""

    env: str = ""

    @classmethod
    def of_run(cls, provenance: Mapping[str, object]) -> CapTarget:
        """The run's recorded `cap_env`; a run that did not record one: its workload kind's default (a command
        workload's is mlxcel's variable, a built-in kind has none), mlxcel's for an input of unknown kind (the
        inputs that predate the record are mlxcel sweeps)."""
        if "cap_env" in provenance:
            return cls(env=str(provenance["cap_env"] or ""))
        kind = next((k for k in KINDS if k.name == provenance.get("workload")), None)
        if kind is None:
            return cls(env=DEFAULT_CAP_ENV)
        field = kind.settings.model_fields.get("cap_env")
        return cls(env=str(field.default) if field is not None else "")

    def setting(self, cap: int | None) -> str | None:
        """The environment line that applies `cap` (`MLXCEL_FUSED_MOE_MAX_DFF=8192`); None when no variable sets it."""
        return f"{self.env}={cap}" if self.env and cap is not None else None
