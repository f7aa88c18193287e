"""Synthetic checkpoints inside a sweep: a config's `synth:` block becomes model entries, made on demand.

A sweep of a command workload measures checkpoints on disk; `synth: {like: DIR, dff: [...]}` asks for checkpoints of
DIR's family at those Dff. They are written once into a cache keyed by their content hash (source files, every
request field, the writer's format), so a resumed sweep, a second config or Dff refinement asking for the same
checkpoint reuses it, and a changed source never reuses a stale one. The cache lives outside results/ (stored runs
are read-only and checkpoints are not results): `synth.cache`, else $XDG_CACHE_HOME/moecal/synth (~/.cache/...).
`moecal plan` asks for the same model entries with `write=False`: a checkpoint not yet in the cache is described from
its plan (the config.json and record it would be written with), so planning writes nothing.
"""

from __future__ import annotations

from pathlib import Path

from harness.config import synth_checkpoints as synth
from harness.config.discover import DiscoveredModel, model_from_config, read_model
from harness.config.eligibility import model_entry
from harness.config.resources import user_cache_dir
from harness.config.schema import ModelEntry, SweepConfig, SynthSettings
from harness.errors import InputError
from harness.measure import synth_writer


def synth_cache_dir(settings: SynthSettings) -> Path:
    """The config's `synth.cache` folder, else the user's moecal cache (config.resources.user_cache_dir)."""
    return Path(settings.cache) if settings.cache else user_cache_dir("synth")


def synthesize(settings: SynthSettings, dff: int, write: bool = True) -> ModelEntry:
    """The model entry of the synthetic checkpoint at `dff`, writing it into the cache unless it is there; with
    `write=False` the entry of what would be written (the same entry: read_model on the written folder reads back
    the plan's config.json and record)."""
    request = synth.Request(
        Path(settings.like), dff, settings.layers, settings.experts, settings.top_k, settings.seed, settings.dtype
    )
    plan = synth.plan(request)
    folder = synth_cache_dir(settings) / plan.sidecar["content_hash"][:16]
    path = folder / plan.name
    if write:
        if not path.is_dir():
            synth_writer.check_fits([plan], folder)
        path = synth_writer.write(plan, request, folder)
        model = read_model(path)
    else:
        model = read_model(path) if path.is_dir() else model_from_config(path, plan.config, plan.sidecar)
    if not isinstance(model, DiscoveredModel):  # the writer's own output must read back
        raise InputError(str(path), "config.json", model.reason)
    return ModelEntry.model_validate(model_entry(model))


def with_synthetic_models(config: SweepConfig, source: str, write: bool = True) -> SweepConfig:
    """The config with one model entry per `synth.dff` appended (checkpoints made or found in the cache; planned
    only, nothing written, with `write=False`)."""
    if config.synth is None:
        return config
    added = [synthesize(config.synth, dff, write) for dff in config.synth.dff]
    names = {m.name for m in config.models}
    clash = next((m.name for m in added if m.name in names), None)
    if clash:
        raise InputError(source, "synth.dff", f"model {clash!r} is both listed in models and synthesized")
    return config.model_copy(update={"models": [*config.models, *added]})


def synthetic_provenance(config: SweepConfig) -> dict[str, str]:
    """model name (or `<like>-dff*` for the synth block, refined points included) → how it was made."""
    notes = {m.name: m.synthetic for m in config.models if m.synthetic}
    if config.synth is not None:
        like = Path(config.synth.like).resolve().name
        notes = {k: v for k, v in notes.items() if not k.startswith(f"{like}-dff")}
        notes[f"{like}-dff*"] = next(m.synthetic for m in config.models if m.name.startswith(f"{like}-dff"))
    return notes
