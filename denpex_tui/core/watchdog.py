"""A bounded, abandonable worker for I/O that may never answer (a hung NFS/FUSE mount).

A read or a stat on a hung mount blocks for minutes, or for ever, in a state no signal can
interrupt. :func:`watchdog` runs the work in a daemon thread and gives up on it when its
``progress()`` has not moved for ``timeout`` seconds; the abandoned thread stays blocked in the
kernel, harmlessly, until the process exits.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

from .bounded import BOUNDED, NoAnswer

__all__ = ["watchdog"]

_SEQ = itertools.count()


def watchdog(fn: Callable[[], Any], progress: Callable[[], Any], timeout: float) -> tuple[bool, Any]:
    """Run ``fn`` in the shared bounded worker (core/bounded.py: one mechanism for the scan's
    sources, the probes' paths and every stat of a path a log names). Returns ``(finished,
    result)``; an exception of ``fn`` is raised here."""
    try:
        return True, BOUNDED.call(f"watchdog:{next(_SEQ)}", fn, timeout, progress=progress)
    except NoAnswer:
        return False, None
