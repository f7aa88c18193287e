"""Install hints (harness/config/install_hint.py): one line naming the extra, in the form that fits the install."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.config import install_hint
from tests.support.helpers import cli


def test_the_command_fits_the_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site-packages"  # a wheel: harness/ with no pyproject.toml beside it
    site.mkdir()
    assert not install_hint.editable(site)
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    assert install_hint.editable(tmp_path)
    monkeypatch.setattr(install_hint, "editable", lambda: False)
    assert install_hint.install_command("cuda") == "pip install 'moecal[cuda]'"
    monkeypatch.setattr(install_hint, "editable", lambda: True)
    assert install_hint.install_command("cuda") == "pip install -e '.[cuda]'"


def test_this_checkout_counts_as_editable() -> None:
    assert install_hint.editable()


def test_missing_optional_module_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command whose backend library is absent ends in the extra to install, not `No module named 'numba'`."""
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` now raises ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "harness.devices.backends.cpu", raising=False)
    result = cli("verify", "--backend", "cpu")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "'cpu' extra" in result.stderr and "pip install" in result.stderr


def test_unknown_modules_are_not_dressed_up_as_extras() -> None:
    assert install_hint.missing_module_hint("yaml") is None
    assert "'fleet' extra" in install_hint.missing_module_hint("ray.util")


def test_doctor_prints_extras_verbatim_and_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """rich console markup would swallow `[cuda]`; doctor escapes every reason. No GPU: no "GPU this machine has"."""
    from harness.devices import backends
    from harness.devices.backends import Detection

    reason = "CuPy is not installed; install it with `pip install 'moecal[cuda]'`"
    found = Detection({"metal": (False, "no"), "cuda": (False, reason), "cpu": (True, "ok")}, {}, False)
    monkeypatch.setattr(backends, "detect", lambda: found)  # doctor imports it when it runs
    text = cli("doctor").stdout
    assert "[cuda]" in text
    assert "GPU this machine has" not in text and "no NVIDIA GPU" in text
    data = json.loads(cli("doctor", "--json").stdout)
    assert data["backends"]["cuda"]["reason"] == reason and data["auto"] == "cpu"
