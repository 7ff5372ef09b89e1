"""The cap on followed files (``--max-files``, default 10 000) and what it leaves out.

* A deleted file that is still read for its grace period (``LINGER_S``: its writer may still
  write) does not count: 20 000 short-lived files in turn are all read.
* At the cap, a file of a newer torchrun attempt (``attempt_N``) takes the place of a file of
  the oldest attempt followed: after a restart, the attempt that runs now is the one to follow.
* Every file left out is counted and reported (an ``error`` event with the count and a sample,
  again whenever the count changes, at most every ``REPORT_EVERY_S``), naming the option.
"""

from __future__ import annotations

import re
import time

__all__ = ["FileCap", "attempt_of"]

REPORT_EVERY_S = 2.0
SAMPLE = 5
_ATTEMPT = re.compile(r"(?:^|/)attempt_(\d{1,6})(?:/|$)")


def attempt_of(path: str) -> int:
    m = _ATTEMPT.search(path)
    return int(m.group(1)) if m else -1


def _lingering(f) -> bool:
    return getattr(f, "cur", 1) is None and getattr(f, "state", "") == "missing"


class FileCap:
    def __init__(self, max_files: int) -> None:
        self.max = max_files
        self._left: set[str] = set()  # paths left out now (a listing shows them again: counted once)
        self.left_dirs = 0  # folders not watched (the tailer's cap on folders: 2 x max + 64)
        self._reported = (0, 0)
        self._reported_at = float("-inf")
        self._census_at = float("-inf")
        self._live = 0
        self._victims: list = []  # followers of old attempts, oldest attempt first

    def _census(self, followers: dict, now: float) -> None:
        if now - self._census_at < 0.5:
            return
        self._census_at = now
        live = [f for f in followers.values() if not _lingering(f)]
        self._live = len(live)
        self._victims = sorted((f for f in live if attempt_of(f.path) >= 0), key=lambda f: -attempt_of(f.path))

    def admit(self, path: str, followers: dict, now: float | None = None):
        """``(admit, victim)``: whether ``path`` may be followed, and the follower it replaces
        (to be removed by the caller), if any."""
        if len(followers) < self.max:
            self._left.discard(path)
            return True, None
        now = time.monotonic() if now is None else now
        self._census(followers, now)
        if self._live < self.max:
            self._live += 1
            self._left.discard(path)
            return True, None
        a = attempt_of(path)
        while self._victims and followers.get(self._victims[-1].source_id) is not self._victims[-1]:
            self._victims.pop()  # gone since the census
        if a >= 0 and self._victims and attempt_of(self._victims[-1].path) < a:
            victim = self._victims.pop()
            self._leave(victim.path)
            self._left.discard(path)
            return True, victim
        self._leave(path)
        return False, None

    def _leave(self, path: str) -> None:
        self._left.add(path)

    @property
    def left(self) -> int:
        return len(self._left)

    def report(self, now: float | None = None, force: bool = False) -> str | None:
        """The message to emit now, if the count changed (rate-limited unless ``force``)."""
        now = time.monotonic() if now is None else now
        if not self.pending or (not force and now - self._reported_at < REPORT_EVERY_S):
            return None
        self._reported, self._reported_at = (self.left, self.left_dirs), now
        dirs = f", {self.left_dirs:,} folders not watched" if self.left_dirs else ""
        eg = f" (e.g. {', '.join(sorted(self._left)[:SAMPLE])})" if self._left else ""
        return (f"more than {self.max:,} files: {self.left:,} not followed{dirs}{eg}; "
                f"raise --max-files (deleted files in their grace period do not count; a newer attempt's "
                f"files replace an older attempt's)")

    @property
    def pending(self) -> bool:
        return (self.left, self.left_dirs) != self._reported
