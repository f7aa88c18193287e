"""The bandwidth check of a finished sweep (harness.analysis.evidence.physics_prior): each measured point's shape, from
the point key and, for a command workload's model, its config.json."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.analysis.evidence.physics_prior import (
    DecodeShape,
    PointPhysics,
    device_bandwidth,
    point_physics,
    whole_model_extras,
)
from harness.config.schema import kind_meaning
from harness.measure.protocol import Point


def _number(value: object, default: int) -> int:
    try:
        number = float(str(value))
    except ValueError:
        return default
    return int(number) if math.isfinite(number) and number > 0 else default


def decode_shape(point: Point) -> DecodeShape | None:
    """A point's decode shape: one MoE layer for a layer workload, the whole model (layers, attention, LM head from
    its config.json when it has one) for a command workload; None without the expert shape."""
    key = point.key
    d_model, dff, top_k = (_number(key.get(k), 0) for k in ("d_model", "dff", "top_k"))
    if not (d_model and dff and top_k):
        return None
    bits, group = _number(key.get("bits"), 4), _number(key.get("group_size"), 64)
    model = point.extra.get("model")
    if not kind_meaning(key.get("workload")).whole_model or model is None:
        return DecodeShape(d_model=d_model, dff=dff, top_k=top_k, bits=bits, group_size=group)
    attention, head = 0, 0
    path = getattr(model, "model_path", None)
    if path:
        try:
            config = json.loads((Path(path) / "config.json").read_text())
        except (OSError, ValueError):
            config = {}
        if isinstance(config, Mapping):
            attention, head = whole_model_extras(config)
    return DecodeShape(
        d_model=d_model,
        dff=dff,
        top_k=top_k,
        layers=_number(getattr(model, "layers", None), 1),
        shared_dff=_number(getattr(model, "shared_dff", None), 0),
        bits=bits,
        group_size=group,
        quant_mode=str(key.get("quant_mode") or "affine"),
        attention_weights=attention,
        head_weights=head,
    )


def sweep_physics(
    points: Sequence[Point], medians: Mapping[tuple[str, int], Mapping[str, float]], device: str
) -> tuple[list[PointPhysics], str]:
    """Per measured point (medians: (model, dff) → arm → median tok/s) its bytes, GB/s and share of the device's
    bandwidth, and where the bandwidth figure comes from ('' when the device is not listed)."""
    known = device_bandwidth(device)
    bandwidth, source = known if known else (None, "")
    out = []
    for point in points:
        shape = decode_shape(point)
        rates = medians.get((str(point.key.get("model")), _number(point.key.get("dff"), 0)))
        if point.skip_reason or shape is None or not rates:
            continue
        out.append(point_physics(point.label, shape.dff, shape, rates, bandwidth))
    return out, source
