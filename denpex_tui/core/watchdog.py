"""A bounded, abandonable worker for I/O that may never answer (a hung NFS/FUSE mount).

A read or a stat on a hung mount blocks for minutes, or for ever, in a state no signal can
interrupt. :func:`watchdog` runs the work in a daemon thread and gives up on it when its
``progress()`` has not moved for ``timeout`` seconds; the abandoned thread stays blocked in the
kernel, harmlessly, until the process exits.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

__all__ = ["watchdog"]


def watchdog(fn: Callable[[], Any], progress: Callable[[], Any], timeout: float) -> tuple[bool, Any]:
    """Run ``fn`` in a daemon thread. Returns ``(finished, result)``; an exception of ``fn`` is
    raised here."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True, name="denpex-io")
    t.start()
    last = progress()
    quiet_since = time.monotonic()
    while True:
        t.join(0.1)
        if not t.is_alive():
            if "error" in box:
                raise box["error"]
            return True, box.get("result")
        now_p = progress()
        if now_p != last:
            last, quiet_since = now_p, time.monotonic()
        elif time.monotonic() - quiet_since >= timeout:
            return False, None
