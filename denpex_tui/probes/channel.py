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

    def close_pipe(self, f) -> None:
        try:
            self.sel.unregister(f)
        except (KeyError, ValueError):
            pass
        f.close()
        self.open_pipes -= 1

    def kill(self) -> None:
        for f in (self.proc.stdout, self.proc.stderr):
            if not f.closed:
                self.close_pipe(f)
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # the session we started: ssh/srun and theirs
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                self.proc.wait()

    @property
    def finished(self) -> bool:
        return self.open_pipes == 0 and self.proc.poll() is not None


__all__ = ["Channel"]
