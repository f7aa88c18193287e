"""reuse_freed_memory (harness.cli.heap): a block freed by the analysis is reused without faulting it in again."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# In a child process: the setting is process-wide and must not change how this test process allocates. The child
# allocates 64 MiB, frees it, and counts the page faults of allocating and touching 64 MiB again.
CHILD = """
import resource, sys
from harness.cli.heap import reuse_freed_memory
applied = reuse_freed_memory() if sys.argv[1] == "reuse" else False
block = bytearray(64 * 2**20)
del block
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
block = bytearray(64 * 2**20)
print(int(applied), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True).stdout
    applied, faults = out.split()
    return applied == "1", int(faults)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_a_freed_block_is_reused_without_page_faults() -> None:
    applied, reused = _faults("reuse")
    _, fresh = _faults("default")
    pages = 64 * 2**20 // 4096
    assert applied
    assert fresh > pages // 2  # glibc's default: the 64 MiB came back from the kernel, faulted in page by page
    assert reused < pages // 20  # kept: already mapped


def test_without_mallopt_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes

    from harness.cli import heap

    class NoMallopt:
        def __init__(self, _name: object) -> None:
            pass

        def __getattr__(self, name: str) -> object:
            raise AttributeError(name)

    monkeypatch.setattr(ctypes, "CDLL", NoMallopt)
    assert heap.reuse_freed_memory() is False
