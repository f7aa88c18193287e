"""MoE model shapes (configs/models.yaml) and how a sweep config's model entry resolves against them.

The built-in workloads never hard-code a model: a config names one (`models: [{name: mixtral-8x7b, layers: 4}]`)
and may override any shape field — `layers` to fit memory, `dff` for a synthetic Dff sweep at a fixed shape. A name
the catalog does not know is accepted only when the entry gives every shape field itself (an inline model), so a
typo in a name is an error instead of a silently invented model.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.config import resources
from harness.config.schema import ModelEntry, field_path
from harness.config.shapes import MoeShape
from harness.errors import InputError

CATALOG_PATH = resources.catalog_path()
SHAPE_FIELDS = (
    "d_model",
    "dff",
    "n_experts",
    "top_k",
    "layers",
    "shared_dff",
    "n_heads",
    "n_kv_heads",
    "head_dim",
    "vocab",
)


class ModelShape(BaseModel):
    """One model's decoder as a decode token sees it; `notes` says where the synthetic model differs from it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    source: str = ""
    notes: str = ""
    d_model: int = Field(gt=0)
    dff: int = Field(gt=0)
    n_experts: int = Field(gt=0)
    top_k: int = Field(gt=0)
    layers: int = Field(gt=0)
    shared_dff: int = Field(0, ge=0)
    n_heads: int = Field(gt=0)
    n_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    vocab: int = Field(gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> ModelShape:
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k={self.top_k} exceeds n_experts={self.n_experts}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads} (GQA groups)")
        return self

    def moe_shape(self, bits: int, group_size: int, dtype: str) -> MoeShape:
        """The routed-expert layer at this model's shape (raises ValueError when the format cannot store it)."""
        return MoeShape(self.d_model, self.dff, self.n_experts, self.top_k, bits, group_size, dtype)

    def shared_shape(self, bits: int, group_size: int, dtype: str) -> MoeShape | None:
        """The shared expert as a one-expert MoE layer (score 1), or None when the model has none."""
        if not self.shared_dff:
            return None
        return MoeShape(self.d_model, self.shared_dff, 1, 1, bits, group_size, dtype)


def _first_error(exc: ValidationError) -> tuple[str, str]:
    first = exc.errors(include_url=False)[0]
    return field_path(tuple(first["loc"])), first["msg"].removeprefix("Value error, ")


@cache
def load_catalog(path: Path = CATALOG_PATH) -> dict[str, ModelShape]:
    """Every model of a catalog file by name; any problem is an InputError naming the file and the entry."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(str(path), "(file)", f"cannot read the model catalog: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise InputError(str(path), "(file)", f"invalid YAML: {exc}") from None
    entries = data.get("models") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise InputError(str(path), "models", "expected a list of model entries under the key 'models'")
    models: dict[str, ModelShape] = {}
    for index, entry in enumerate(entries):
        try:
            model = ModelShape.model_validate(entry)
        except ValidationError as exc:
            where, problem = _first_error(exc)
            raise InputError(str(path), f"models[{index}].{where}", problem) from None
        if model.name in models:
            raise InputError(str(path), f"{where}.name", f"model {model.name!r} is listed twice")
        models[model.name] = model
    return models


def resolve_model(entry: ModelEntry, where: str, config_path: str, catalog: dict[str, ModelShape]) -> ModelShape:
    """The catalog shape named by a config's model entry with the entry's shape fields applied on top; `where` is
    the entry's field path in the config (e.g. 'models[0]'), for error messages."""
    overrides = {f: getattr(entry, f) for f in SHAPE_FIELDS if getattr(entry, f) is not None}
    base = catalog.get(entry.name)
    if base is None:
        missing = [f for f in SHAPE_FIELDS if f not in overrides and f != "shared_dff"]
        if missing:
            known = ", ".join(sorted(catalog))
            raise InputError(
                config_path,
                f"{where}.name",
                f"unknown model {entry.name!r}; known: {known} (or define it inline with {', '.join(missing)})",
            )
        data = {"name": entry.name, **overrides}
    else:
        data = {**base.model_dump(), **overrides}
    try:
        return ModelShape.model_validate(data)
    except ValidationError as exc:
        location, problem = _first_error(exc)
        field = f".{location}" if location in SHAPE_FIELDS else ""
        raise InputError(config_path, where + field, problem) from None
