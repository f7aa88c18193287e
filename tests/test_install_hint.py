"""Install hints (harness/install_hint.py): one line naming the extra, in the form that fits the install."""

from __future__ import annotations

import json
import sys

import pytest

from harness import install_hint
from tests.helpers import cli


class _Dist:
    def __init__(self, direct_url: dict | None) -> None:
        self.text = None if direct_url is None else json.dumps(direct_url)

    def read_text(self, name: str) -> str | None:
        return self.text


@pytest.mark.parametrize(
    ("direct_url", "expected"),
    [
        (None, "pip install 'moecal[cuda]'"),  # a wheel from an index: no direct_url.json
        ({"url": "file:///tmp/moecal-0.1.0-py3-none-any.whl", "archive_info": {}}, "pip install 'moecal[cuda]'"),
        ({"url": "file:///src/moecal", "dir_info": {"editable": True}}, "pip install -e '.[cuda]'"),
    ],
)
def test_the_command_fits_the_install(monkeypatch: pytest.MonkeyPatch, direct_url: dict | None, expected: str) -> None:
    monkeypatch.setattr(install_hint.metadata, "distribution", lambda name: _Dist(direct_url))
    install_hint.editable.cache_clear()
    try:
        assert install_hint.install_command("cuda") == expected
    finally:
        install_hint.editable.cache_clear()


def test_missing_optional_module_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command whose backend library is absent ends in the extra to install, not `No module named 'numba'`."""
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` now raises ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "harness.backends.cpu", raising=False)
    result = cli("verify", "--backend", "cpu")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "'cpu' extra" in result.stderr and "pip install" in result.stderr


def test_unknown_modules_are_not_dressed_up_as_extras() -> None:
    assert install_hint.missing_module_hint("yaml") is None
    assert "'fleet' extra" in install_hint.missing_module_hint("ray.util")


def test_doctor_prints_extras_verbatim_and_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """rich console markup would swallow `[cuda]`; doctor escapes every reason. No GPU: no "GPU this machine has"."""
    from harness.backends import Detection
    from harness.commands import doctor

    reason = "CuPy is not installed; install it with `pip install 'moecal[cuda]'`"
    found = Detection({"metal": (False, "no"), "cuda": (False, reason), "cpu": (True, "ok")}, {}, False)
    monkeypatch.setattr(doctor, "detect", lambda: found)
    text = cli("doctor").stdout
    assert "[cuda]" in text
    assert "GPU this machine has" not in text and "no NVIDIA GPU" in text
    data = json.loads(cli("doctor", "--json").stdout)
    assert data["backends"]["cuda"]["reason"] == reason and data["auto"] == "cpu"
