"""One bounded, abandonable worker for every blocking call on a path Denpex does not control.

A path a log names (``No space left on device: '/ckpt/x.pt'``), a source on a dead NFS or FUSE
mount, the nearest existing ancestor of a checkpoint folder: a ``stat`` or a ``read`` there can
block for minutes, or for ever, in a state no signal interrupts (the kernel's D state). So the
call runs in a daemon thread, and the caller waits at most ``timeout`` seconds for it (or, with
``progress``, until ``progress()`` has not moved for ``timeout`` seconds: a big file that is being
read is not a hung one). Past that it is abandoned: :class:`NoAnswer` says "did not answer in N
s", the thread stays blocked in the kernel, harmlessly, and while it is still stuck no second
thread is started for the same ``key`` (a dead mount costs one thread, not one per refresh).

Users: the scan's sources and discovery (core/scan.py), the probes' path readings
(probes/sampler.py), and every stat of a log-derived path (:func:`stat`, :func:`isdir`,
:func:`exists`: the differential's commands, probe ``--logs``' path resolution). The live
tailer has its own asynchronous lanes per mount (live/tailer.py) on the same principle.

A process whose thread is stuck in D state cannot finish exiting; one-shot commands that may
meet one run their work in a forked child (cli.py ``_detached``) so the shell gets its prompt back.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

__all__ = ["NoAnswer", "Bounded", "BOUNDED", "STAT_TIMEOUT", "stat", "isdir", "exists", "answers"]

STAT_TIMEOUT = 2.0


class NoAnswer(TimeoutError):
    """The call did not answer within its bound (it was abandoned, or one on the same key is
    still stuck)."""

    def __init__(self, what: str, timeout: float, still: bool = False):
        self.what, self.timeout = what, timeout
        msg = f"{what}: did not answer in {timeout:g} s" + (" (an earlier call there is still stuck)" if still else "")
        super().__init__(msg)


class Bounded:
    """Run blocking calls in daemon threads, each bounded; at most one stuck thread per key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stuck: dict[str, tuple[threading.Thread, float]] = {}

    def call(self, key: str, fn: Callable[[], Any], timeout: float, *,
             progress: Callable[[], Any] | None = None, what: str | None = None) -> Any:
        """``fn()``, or :class:`NoAnswer` when it did not answer in ``timeout`` seconds (with
        ``progress``: ``timeout`` seconds without ``progress()`` moving)."""
        what = what or key
        with self._lock:
            old = self._stuck.get(key)
            if old is not None:
                if old[0].is_alive():
                    raise NoAnswer(what, old[1], still=True)
                del self._stuck[key]
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                box["error"] = exc

        t = threading.Thread(target=run, name=f"denpex-io:{key[:60]}", daemon=True)
        t.start()
        if progress is None:
            t.join(timeout)
        else:
            last, quiet_since = progress(), time.monotonic()
            while True:
                t.join(0.1)
                if not t.is_alive():
                    break
                now_p = progress()
                if now_p != last:
                    last, quiet_since = now_p, time.monotonic()
                elif time.monotonic() - quiet_since >= timeout:
                    break
        if t.is_alive():
            with self._lock:
                self._stuck[key] = (t, timeout)
            raise NoAnswer(what, timeout)
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def stuck(self) -> list[str]:
        with self._lock:
            return [k for k, (t, _) in self._stuck.items() if t.is_alive()]


BOUNDED = Bounded()


def stat(path: str, timeout: float = STAT_TIMEOUT) -> os.stat_result:
    """``os.stat(path)`` bounded: :class:`NoAnswer` past ``timeout``, ``OSError`` as usual. The
    key is the path itself: a stat, isdir or exists of a path already stuck answers at once."""
    return BOUNDED.call(path, lambda: os.stat(path), timeout, what=path)


def isdir(path: str, timeout: float = STAT_TIMEOUT) -> bool | None:
    """Whether ``path`` is a directory; None when it did not answer."""
    try:
        return BOUNDED.call(path, lambda: os.path.isdir(path), timeout, what=path)
    except NoAnswer:
        return None


def exists(path: str, timeout: float = STAT_TIMEOUT) -> bool | None:
    try:
        return BOUNDED.call(path, lambda: os.path.exists(path), timeout, what=path)
    except NoAnswer:
        return None


def answers(path: str, timeout: float = STAT_TIMEOUT) -> str | None:
    """None when a stat of ``path`` answers (whatever it says), else the "did not answer in N s"
    sentence, for a report."""
    try:
        stat(path, timeout)
    except NoAnswer as exc:
        return str(exc)
    except OSError:
        pass
    return None
