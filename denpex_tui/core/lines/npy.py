"""numpy, imported when first used: ``from denpex_tui.core.lines import npy as np``.

numpy costs 90 ms to import, a third of a command's start-up, and a small log (a one-line file,
``explain`` on a pasted traceback, ``--help``) never needs it: the chunk paths take numpy only
for spans of tens of kilobytes. The first attribute read imports numpy (under the import lock,
so two threads that get here together import it once) and copies its namespace here, so later
reads are plain module lookups, no slower than on numpy itself. This module's own names are
kept (numpy has a ``load`` too)."""

from __future__ import annotations

import os
import sys

_OWN = frozenset(("import_now", "distinct", "distinct_inverse", "first_of_runs", "_numpy", "os", "sys"))


def __getattr__(name: str):
    numpy = _numpy()
    globals().update((k, v) for k, v in vars(numpy).items() if not k.startswith("__") and k not in _OWN)
    return getattr(numpy, name)


def _numpy():
    """numpy, imported once. Its OpenBLAS starts a thread per core as it loads (a fifth of the
    import: 67 ms against 50, medians of 5 on two cores) and Denpex does no linear algebra: one
    is asked for, for the import only (the commands Denpex starts, ``--exec``, get the
    environment as the user set it; a user's own setting is kept)."""
    if "numpy" in sys.modules:
        import numpy

        return numpy
    mine = "OPENBLAS_NUM_THREADS" not in os.environ
    if mine:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy
    finally:
        if mine:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
    return numpy


def import_now() -> None:
    """Import numpy now, in this thread. Called before forking workers: a child forked while
    another thread is inside numpy's import inherits its module lock held by a thread that does
    not exist there, and waits on it for ever (seen: watch's history pool hung at its first
    chunk). Importing here first also waits for any thread already importing it."""
    __getattr__("ndarray")


def distinct(a, b=None):
    """The sorted distinct values of a 1-D array (of ``a`` and ``b`` together): ``numpy.unique``
    (``union1d``) without their first call's cost. numpy 2.4's ``unique`` asks ``numpy.ma``
    whether the array is masked, and importing ``numpy.ma`` takes 16 ms: in every pool worker of
    a history pass, on the way to the first answer."""
    import numpy

    v = numpy.ravel(a) if b is None else numpy.concatenate((numpy.ravel(a), numpy.ravel(b)))
    s = numpy.sort(v)
    if s.size < 2:
        return s
    keep = numpy.empty(s.size, dtype=bool)
    keep[0] = True
    numpy.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def first_of_runs(a):
    """The index of the first element of each run of equal values of a 1-D array (of every
    distinct value, when ``a`` is sorted): ``numpy.unique(a, return_index=True)[1]`` for a
    sorted array, without its sort."""
    import numpy

    if len(a) == 0:
        return numpy.empty(0, dtype=numpy.int64)
    return numpy.concatenate((numpy.zeros(1, dtype=numpy.int64), numpy.flatnonzero(a[1:] != a[:-1]) + 1))


def distinct_inverse(a):
    """``numpy.unique(a, return_inverse=True)`` of a 1-D array, the inverse flat. A chunk's
    per-line values (a line's stream, its hour) come in runs: when they do, only the first value
    of each run is sorted (an argsort of 50,000 lines was 2 ms, a third of a console chunk's
    stream index), and each element takes its run's index."""
    import numpy

    n = len(a)
    if n > 64:
        heads = first_of_runs(a)
        if len(heads) * 4 < n:
            values, hinv = numpy.unique(a[heads], return_inverse=True)
            run = numpy.zeros(n, dtype=numpy.int64)
            run[heads[1:]] = 1
            numpy.cumsum(run, out=run)
            return values, hinv.ravel()[run]
    values, inv = numpy.unique(a, return_inverse=True)
    return values, inv.ravel()
