"""How glibc's heap serves the readers' big buffers (glibc only; a no-op elsewhere).

Two settings for two kinds of process:

* A **history reader** (a pool worker, or ``scan`` itself) allocates an 8 MiB chunk, copies
  it once or twice and frees it, a hundred times a second. Served from fresh mappings, every
  page of every chunk is faulted in and zeroed by the kernel: 0.64 s of system time per GB read
  against 0.13 s when the freed chunks' pages are reused (measured on the 1 GiB benchmark job).
  :func:`reuse_big_buffers` keeps them in the heap: a fixed mmap threshold above the biggest
  chunk, and a trim threshold that leaves a few chunks' worth of free pages mapped.
* The **live engine** (below) is the opposite case.

The live engine reads in pieces of up to 8 MiB and splits over-long lines into 1 MiB
pieces, from several threads.  glibc raises its mmap threshold dynamically after such
buffers are freed (up to 32 MiB), so later ones come from the per-thread heaps, which
fragment and are rarely given back: one 2 GiB line made the process's RSS grow by
~180 MB although at most ~60 MB of chunks are alive at once.  A fixed threshold of 1 MiB
(which also stops the dynamic adjustment) serves every buffer of that size with its own
mapping, unmapped on free.  Measured by ``bench/long_line_rss.py``.

:func:`give_back` returns the heaps' free pages to the kernel (``malloc_trim``), once a big
piece of work has let go of what it made: the history read of a 1 GB, 256-file job leaves
about 27 MB of free but resident heap (the pool's results, unpickled piece by piece), and the
merge that follows would add its own arrays on top.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["big_buffers_unmapped", "give_back", "reuse_big_buffers"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_done = False


def _libc_fn(name: str, argtypes: list, restype):
    """A function of the C library, as the process already has it loaded (None: not Linux, or
    not glibc: musl has no mallopt). ``ctypes.util.find_library`` was not used: it runs
    ``ldconfig -p``, 27 ms of scan's start-up."""
    if not sys.platform.startswith("linux"):
        return None
    for lib in (None, "libc.so.6"):
        try:
            fn = getattr(ctypes.CDLL(lib), name)
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = argtypes, restype
        return fn
    return None


def _mallopt():
    return _libc_fn("mallopt", [ctypes.c_int, ctypes.c_int], ctypes.c_int)


def reuse_big_buffers(biggest: int = 32 << 20) -> bool:
    """Serve buffers up to ``biggest`` bytes from the heap and keep up to four of them free
    there: for a process that reads history chunks and ends (see the module's doc)."""
    mallopt = _mallopt()
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, biggest)) and bool(mallopt(_M_TRIM_THRESHOLD, 4 * biggest))


def big_buffers_unmapped(threshold: int = 1 << 20) -> bool:
    global _done
    if _done:
        return _done
    mallopt = _mallopt()
    if mallopt is None:
        return False
    _done = bool(mallopt(_M_MMAP_THRESHOLD, threshold))
    return _done


def give_back() -> bool:
    """Free heap pages back to the kernel (glibc's ``malloc_trim(0)``); False where there is none."""
    trim = _libc_fn("malloc_trim", [ctypes.c_size_t], ctypes.c_int)
    return trim is not None and bool(trim(0))
