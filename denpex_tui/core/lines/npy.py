"""numpy, imported when first used: ``from denpex_tui.core.lines import npy as np``.

numpy costs 90 ms to import, a third of a command's start-up, and a small log (a one-line file,
``explain`` on a pasted traceback, ``--help``) never needs it: the chunk paths take numpy only
for spans of tens of kilobytes. The first attribute read imports numpy (under the import lock,
so two threads that get here together import it once) and copies its namespace here, so later
reads are plain module lookups, no slower than on numpy itself. This module's own names are
kept (numpy has a ``load`` too)."""

from __future__ import annotations

_OWN = frozenset(("import_now", "distinct"))


def __getattr__(name: str):
    import numpy

    globals().update((k, v) for k, v in vars(numpy).items() if not k.startswith("__") and k not in _OWN)
    return getattr(numpy, name)


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
