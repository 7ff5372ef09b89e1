"""``--exec`` sources: logs that are not files (``kubectl logs -f``, ``ssh host tail -F``).

``--exec 'kubectl logs -f pod-3'`` runs the command through ``/bin/sh -c`` and follows
its output (stdout and stderr merged, stdin from /dev/null, in its own process group
so that stopping Denpex stops the whole pipeline).  ``--exec 3='cmd'`` also says the
lines come from rank 3; otherwise ranks are inferred from the lines by the core.

A command that ends produces ``SourceEvent(state="exited", detail="exit code N")`` (or
"killed by signal SIGTERM") and is **not restarted**: restarting silently would hide
that the stream broke (and could replay old lines).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import re
import signal
from typing import AsyncIterator

from .sources import MAX_LINE, Chunk, SourceEvent

__all__ = ["ExecSource", "parse_exec_spec", "kill_all"]

_RANK_SPEC = re.compile(r"^\s*(\d+)=(.*)$", re.S)

# Process groups of the commands still running. Each command runs in its own session (a
# terminal's hangup must not reach it behind our back), so nothing else stops them when
# Denpex dies: the signal handlers of follow and watch, and exit, call kill_all().
_RUNNING: set[int] = set()


def kill_all(sig: int = signal.SIGTERM) -> int:
    """Signal every running command's process group (synchronous, signal-handler safe);
    returns how many groups were signalled."""
    n = 0
    for pgid in list(_RUNNING):
        try:
            os.killpg(pgid, sig)
            n += 1
        except (ProcessLookupError, PermissionError):
            _RUNNING.discard(pgid)
    return n


atexit.register(lambda: kill_all(signal.SIGKILL))


def parse_exec_spec(text: str) -> tuple[int | None, str]:
    """``'3=kubectl logs -f pod-3'`` -> ``(3, 'kubectl logs -f pod-3')``; ``'cmd'`` -> ``(None, 'cmd')``.

    Only a leading ``<digits>=`` is a rank: ``'FOO=1 cmd'`` and ``'cmd --x=3'`` are plain
    commands.  An empty command raises ``ValueError``.
    """
    m = _RANK_SPEC.match(text)
    if m:
        rank, cmd = int(m.group(1)), m.group(2)
    else:
        rank, cmd = None, text
    if not cmd.strip():
        raise ValueError(f"--exec {text!r}: empty command")
    return rank, cmd


def _describe_exit(rc: int | None) -> str:
    if rc is None:
        return "exit status unknown"
    if rc < 0:
        try:
            return f"killed by signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


class ExecSource:
    """Run one shell command and yield its output as whole-line ``Chunk`` s."""

    def __init__(self, command: str, rank: int | None = None, *, source_id: str | None = None,
                 read_size: int = 1 << 16, max_line: int = MAX_LINE) -> None:
        self.command = command
        self.rank = rank
        self.source_id = source_id or f"exec:{command}"
        self.path = f"exec: {command}"
        self.read_size = read_size
        self.max_line = max_line
        self.proc: asyncio.subprocess.Process | None = None
        self.returncode: int | None = None
        self._stopping = False

    def _chunk(self, data: bytes, off: int, pe: bool = False, cont: bool = False, note: str = "") -> Chunk:
        return Chunk(self.source_id, self.path, data, off, "exec", False, pe, cont, note, self.rank)

    async def run(self) -> AsyncIterator[Chunk | SourceEvent]:
        try:
            self.proc = await asyncio.create_subprocess_shell(
                self.command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as e:
            yield SourceEvent(self.path, "error", f"cannot start: {e.strerror or e}", self.source_id, kind="exec")
            return
        proc = self.proc
        _RUNNING.add(proc.pid)
        yield SourceEvent(self.path, "added", f"pid {proc.pid}" + (f", rank {self.rank}" if self.rank is not None else ""),
                          self.source_id, kind="exec")
        assert proc.stdout is not None
        pending = b""
        cont = False
        off = 0  # offset of pending[0] in the stream
        while True:
            data = await proc.stdout.read(self.read_size)
            if not data:
                break
            buf = pending + data if pending else data
            nl = buf.rfind(b"\n")
            if nl >= 0:
                yield self._chunk(buf[: nl + 1], off, False, cont)
                off += nl + 1
                buf = buf[nl + 1 :]
                cont = False
            while len(buf) > self.max_line:
                yield self._chunk(buf[: self.max_line] + b"\n", off, True, cont, "line longer than 1 MiB split")
                off += self.max_line
                buf = buf[self.max_line :]
                cont = True
            pending = buf
        if pending:
            yield self._chunk(pending + b"\n", off, True, cont, "output ended without a newline; newline added")
        rc = await proc.wait()
        self.returncode = rc
        self._closed()
        if not self._stopping:
            yield SourceEvent(self.path, "exited", _describe_exit(rc) + " (not restarted)", self.source_id, kind="exec")

    def _closed(self) -> None:
        """The command ended: forget its group, and close the pipe transport while the
        loop still runs (else its finalizer, after ``asyncio.run`` ends, prints "Event
        loop is closed" for a command that was still writing, such as ``yes``)."""
        proc = self.proc
        if proc is None:
            return
        _RUNNING.discard(proc.pid)
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()

    async def stop(self, grace: float = 2.0) -> None:
        """Terminate the command's process group (SIGTERM, then SIGKILL after ``grace``)."""
        self._stopping = True
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
                try:
                    os.killpg(proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    break
                try:
                    await asyncio.wait_for(proc.wait(), wait)
                    break
                except asyncio.TimeoutError:
                    continue
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # what the shell left behind in its group
        except (ProcessLookupError, PermissionError):
            pass
        self._closed()
