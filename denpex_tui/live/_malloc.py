"""Big buffers back to the kernel when freed (glibc only; a no-op elsewhere).

The live engine reads in pieces of up to 8 MiB and splits over-long lines into 1 MiB
pieces, from several threads.  glibc raises its mmap threshold dynamically after such
buffers are freed (up to 32 MiB), so later ones come from the per-thread heaps, which
fragment and are rarely given back: one 2 GiB line made the process's RSS grow by
~180 MB although at most ~60 MB of chunks are alive at once.  A fixed threshold of 1 MiB
(which also stops the dynamic adjustment) serves every buffer of that size with its own
mapping, unmapped on free.  Measured by ``bench/long_line_rss.py``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["big_buffers_unmapped"]

_M_MMAP_THRESHOLD = -3
_done = False


def big_buffers_unmapped(threshold: int = 1 << 20) -> bool:
    global _done
    if _done or not sys.platform.startswith("linux"):
        return _done
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _done = bool(mallopt(_M_MMAP_THRESHOLD, threshold))
    return _done
