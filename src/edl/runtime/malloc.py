"""Keep glibc from mmap-ing (and page-faulting) every multi-megabyte message buffer.

glibc serves allocations above M_MMAP_THRESHOLD with fresh mmap pages and
returns them on free, so each 4 MiB gradient or parameter message costs a
thousand page faults on both ends: measured, that tripled the CPU time of a
push/pull round trip (bench/runtime.py). Raising the thresholds keeps such
buffers in the heap and reuses them. No-op where glibc's mallopt is missing.
"""

from __future__ import annotations

import contextlib
import ctypes

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
BIG = 256 * 1024 * 1024


def tune_malloc(mmap_threshold: int = 64 * 1024 * 1024) -> bool:
    """Raise glibc's mmap/trim thresholds for this process; True when applied."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None)
        return bool(
            libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold)
            and libc.mallopt(M_TRIM_THRESHOLD, BIG)
            and libc.mallopt(M_TOP_PAD, mmap_threshold)
        )
    return False
