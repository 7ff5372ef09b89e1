"""One transport process (ssh, srun, kubectl, the user's --probe-cmd) and its two pipes.

Started in a session of its own (so ending it ends the ssh or srun it runs and theirs), stdin
closed, stdout and stderr non-blocking and registered with the fleet's selector. Killing is by
that session's id only: SIGTERM, then SIGKILL after 2 s.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time

from .transports import ChannelSpec


class Channel:
    def __init__(self, spec: ChannelSpec, sel: selectors.BaseSelector) -> None:
        self.spec = spec
        self.out = bytearray()
        self.err = bytearray()
        self.skipping = False  # inside a line longer than MAX_LINE
        self.pending: dict[int, bytearray] = {}  # srun --label: a task's line so far
        self.proc = subprocess.Popen(
            spec.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, env=spec.env, close_fds=True)
        self.sel = sel
        for f, kind in ((self.proc.stdout, "out"), (self.proc.stderr, "err")):
            os.set_blocking(f.fileno(), False)
            sel.register(f, selectors.EVENT_READ, (self, kind))
        self.open_pipes = 2
        self.term_at: float | None = None

    def close_pipe(self, f) -> None:
        try:
            self.sel.unregister(f)
        except (KeyError, ValueError):
            pass
        f.close()
        self.open_pipes -= 1

    def kill(self, wait: bool = True) -> None:
        """End its session: SIGTERM now; with ``wait``, SIGKILL after 2 s and reap. Without,
        the caller calls :meth:`reap` later (the fleet's loop never waits for a process)."""
        for f in (self.proc.stdout, self.proc.stderr):
            if not f.closed:
                self.close_pipe(f)
        if self.proc.poll() is None:
            if self.term_at is None:
                self._signal(signal.SIGTERM)  # the session we started: ssh/srun and theirs
                self.term_at = time.monotonic()
            if wait:
                try:
                    self.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    self._signal(signal.SIGKILL)
                    self.proc.wait()

    def reap(self) -> bool:
        """True once the process is gone; SIGKILL 2 s after a SIGTERM it ignored."""
        if self.proc.poll() is not None:
            return True
        if self.term_at is not None and time.monotonic() - self.term_at > 2:
            self._signal(signal.SIGKILL)
        return False

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


__all__ = ["Channel"]
