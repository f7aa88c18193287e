"""Package data lookup (harness/config/resources.py): presets by name, the caller's files first, one-line summaries."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import resources
from harness.errors import InputError
from tests.support.helpers import REPO


def test_package_data_is_the_repository_copy() -> None:
    # In a checkout harness/data/* are links to the top-level directories: one copy of each file.
    assert resources.kernel_dir().resolve() == (REPO / "kernels").resolve()
    assert resources.catalog_path().resolve() == (REPO / "configs" / "models.yaml").resolve()


def test_presets_are_the_shipped_configs_without_the_catalog() -> None:
    presets = {p.name: p for p in resources.presets()}
    assert sorted(presets) == sorted(p.stem for p in (REPO / "configs").glob("*.yaml") if p.name != "models.yaml")
    smoke = presets["cpu-smoke"]
    assert (smoke.backend, smoke.workload) == ("cpu", "layer")
    assert smoke.summary.startswith("CPU smoke sweep:")
    assert all(len(p.summary) <= resources.SUMMARY_CHARS and "\n" not in p.summary for p in presets.values())


def test_config_argument_prefers_the_callers_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resources.config_argument(Path("cpu-smoke")) == resources.config_dir() / "cpu-smoke.yaml"
    assert resources.config_argument(Path("cpu-smoke.yaml")) == resources.config_dir() / "cpu-smoke.yaml"
    Path("cpu-smoke.yaml").write_text("name: mine\n")
    assert resources.config_argument(Path("cpu-smoke.yaml")) == Path("cpu-smoke.yaml")
    assert resources.config_argument(Path("sub/h200.yaml")) == Path("sub/h200.yaml")  # a path is never a preset
    with pytest.raises(InputError, match="not a preset name"):
        resources.config_argument(Path("no-such-preset"))
