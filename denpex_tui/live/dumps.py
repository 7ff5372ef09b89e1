"""Flight Recorder dumps and NCCL RAS reports of a followed job, as they appear.

Dumps are written when a job fails or hangs (ProcessGroupNCCL on a timeout, a job's own handler,
a person asking a live rank), usually into the job's folders, and rewritten whole. They are not
logs: the tailer never follows them. This watcher looks for them every few seconds under the
job's folders (names :func:`~denpex_tui.core.sources.looks_like_evidence`, bounded walk) and in
the files named on the command line that are dumps, and reads a file again when its size or
mtime changes (:func:`~denpex_tui.core.scan.read_evidence`: bounded, pickles never run).
"""

from __future__ import annotations

import os
import stat

from denpex_tui.core.job import JobState
from denpex_tui.core.scan import read_evidence
from denpex_tui.core.sources import evidence_kind, looks_like_evidence

__all__ = ["DumpWatch", "split_evidence"]

MAX_ENTRIES = 50_000
MAX_DEPTH = 8


def split_evidence(paths: list[str]) -> tuple[list[str], list[str]]:
    """(the paths to follow as logs, the files named that are dumps or RAS reports)."""
    logs, ev = [], []
    for p in paths:
        try:
            is_file = stat.S_ISREG(os.stat(p).st_mode)
        except OSError:
            is_file = False
        (ev if is_file and evidence_kind(p) else logs).append(p)
    return logs, ev


class DumpWatch:
    def __init__(self, paths: list[str], explicit: list[str] | None = None) -> None:
        self.roots = [p for p in paths if os.path.isdir(p)]
        self.explicit = list(explicit or [])
        self._seen: dict[str, tuple[int, int]] = {}
        self.warnings: list[str] = []

    def _candidates(self) -> list[str]:
        out = list(self.explicit)
        n = 0
        for root in self.roots:
            stack = [(root, 0)]
            while stack:
                d, depth = stack.pop()
                try:
                    with os.scandir(d) as it:
                        entries = list(it)
                except OSError:
                    continue
                for e in entries:
                    n += 1
                    if n > MAX_ENTRIES:
                        return out
                    try:
                        if e.is_dir(follow_symlinks=False):
                            if depth < MAX_DEPTH and not e.name.startswith("."):
                                stack.append((e.path, depth + 1))
                        elif looks_like_evidence(e.name) and e.is_file(follow_symlinks=False):
                            out.append(e.path)
                    except OSError:
                        continue
        return out

    def poll(self, job: JobState) -> bool:
        """Read what is new or changed into ``job``; True when something was added."""
        changed = False
        for path in self._candidates():
            try:
                st = os.stat(path)
            except OSError:
                continue
            sig = (st.st_size, st.st_mtime_ns)
            if self._seen.get(path) == sig or not stat.S_ISREG(st.st_mode):
                continue
            self._seen[path] = sig
            kind = evidence_kind(path)
            if kind and read_evidence(path, kind, job, self.warnings):
                changed = True
        return changed
