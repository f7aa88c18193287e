"""Every model folder a command sweep names is checked before the first timed run.

A benchmark pointed at a folder that is not there, or whose config.json is missing or broken, fails each of its
runs only when its turn comes, perhaps hours into a sweep, and the failure reads like the benchmark's. Checking
them all up front turns each into one line naming the config, the model and the folder.
"""

from __future__ import annotations

from pathlib import Path

from harness.config.schema import SweepConfig
from harness.errors import InputError
from harness.json_input import load_json_object


def check_model_folders(config: SweepConfig, source: str) -> None:
    """Each model's `model_path`: it exists, and a folder holds a parseable config.json (a single-file checkpoint,
    e.g. a .gguf, is only checked to exist). Models without a model_path are the benchmark's business."""
    for index, model in enumerate(config.models):
        if not model.model_path:
            continue
        folder = Path(model.model_path)
        field = f"models[{index}].model_path"
        if not folder.exists():
            raise InputError(source, field, f"{folder} does not exist (model {model.name!r})")
        if not folder.is_dir():
            continue
        if not (folder / "config.json").is_file():
            raise InputError(source, field, f"no config.json in {folder} (model {model.name!r})")
        try:
            load_json_object(folder / "config.json")
        except InputError as exc:
            raise InputError(
                source, field, f"{exc.source}: {exc.field}: {exc.problem} (model {model.name!r})"
            ) from None
