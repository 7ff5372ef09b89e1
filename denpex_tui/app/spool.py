"""The lines of ``--exec`` sources that the view keeps, in private files (the log view reads its
rows back from files; a command's output is no file). No Textual here.

Bounded: all the spools of one view hold at most ``MAX_BYTES`` on disk (``/tmp`` is often a
tmpfs, i.e. RAM: ``yes`` wrote 114 MB in 20 s). Past the cap a command's lines are no longer kept
for the view (the engine still reads every line for findings); a marker line says so where the
cap was reached, and again each time another ``NOTE_EVERY`` lines were dropped, with the count.

The folder is removed by :meth:`Spool.close` (the view's worker ending: ``q``), by
:func:`remove_all` (watch's signal path: SIGTERM, SIGHUP, a closed pty), and at exit. Those run
on different threads (the view's worker, the main thread, watch's last-resort timer that ends
the process with ``os._exit``), so every change to a spool folder (made, a file added, removed)
happens under one lock: a removal that returns has removed the folder, not raced another one
half-way; and once :func:`remove_all` has run no spool folder is made again (a batch of lines
the worker was still handling cannot leave a new one behind).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading

__all__ = ["Spool", "MAX_BYTES", "remove_all"]

MAX_BYTES = 64 << 20
NOTE_EVERY = 100_000

_LIVE: set["Spool"] = set()
_LOCK = threading.RLock()
_ENDED = False  # remove_all ran: the process is ending, no spool folder is made any more


class Spool:
    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = MAX_BYTES if max_bytes is None else max_bytes
        self.dir: str | None = None
        self.used = 0
        self.dropped_lines = 0
        self.dropped_bytes = 0
        self._noted = 0
        self._files: dict[str, object] = {}

    def path(self, n: int) -> str:
        """A new spool file's path (the folder is made on first use). Raises OSError once
        :func:`remove_all` has run."""
        with _LOCK:
            if _ENDED:
                raise OSError("denpex is ending: no --exec output is kept any more")
            if self.dir is None:
                self.dir = tempfile.mkdtemp(prefix="denpex-view-")
                _LIVE.add(self)
            p = os.path.join(self.dir, f"{n}.log")
            self._files[p] = open(p, "ab")
            return p

    def write(self, path: str, texts: list[str]) -> None:
        fh = self._files[path]
        out = []
        for t in texts:
            b = t.encode("utf-8", "replace") + b"\n"
            if self.used + len(b) > self.max_bytes:
                self.dropped_lines += 1
                self.dropped_bytes += len(b)
                continue
            out.append(b)
            self.used += len(b)
        if self.dropped_lines and self.dropped_lines >= self._noted + (NOTE_EVERY if self._noted else 1):
            self._noted = self.dropped_lines
            out.append((f"[denpex: the view keeps at most {self.max_bytes >> 20} MiB of --exec output; "
                        f"{self.dropped_lines:,} lines ({self.dropped_bytes / (1 << 20):.1f} MiB) dropped from "
                        "the view so far (findings still see every line)]\n").encode())
        if out:
            fh.write(b"".join(out))
            fh.flush()

    def close(self) -> None:
        for fh in self._files.values():
            try:
                fh.close()
            except OSError:
                pass
        self._files.clear()
        with _LOCK:
            self._remove()

    def _remove(self) -> None:  # under _LOCK
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        _LIVE.discard(self)


def remove_all() -> None:
    """Remove every spool folder still there, and make none after (thread and exit safe: it
    returns once no folder is left, whoever else was removing or adding one)."""
    global _ENDED
    with _LOCK:
        _ENDED = True
        for s in list(_LIVE):
            s._remove()


atexit.register(remove_all)
