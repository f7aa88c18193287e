"""Freed memory kept for reuse in the commands that analyse whole inputs (glibc's mallopt).

Why: glibc serves an allocation above its mmap threshold (32 MiB at most) straight from the kernel and hands it
back on free, so every one of the many ten-million-row temporaries that a million-row mlxcel CSV's analysis makes
(a column sorted, compared, taken) is faulted in afresh, page by page: about 20 s of system time of `moecal
summarize` on such a file, a third of its CPU (issue 38; README, "The harness's own cost"). With mmap off and
the heap's top not trimmed below 2 GiB, a freed block is reused as it is, already mapped. The price is a larger
peak (a free block the next request does not fit stays held), paid only by these one-shot commands, never by a
sweep. Where there is no mallopt (macOS, musl) nothing changes.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4  # glibc's malloc.h
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes a C int: 2 GiB is the most it can say
TOP_PAD = 256 * 2**20  # each growth of the heap asks for this much more, so ten-million-row columns grow it rarely


def reuse_freed_memory() -> bool:
    """Set glibc's heap to reuse freed blocks (module docstring); False where the C library has no mallopt."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settings = ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD))
    return all(mallopt(option, value) == 1 for option, value in settings)
