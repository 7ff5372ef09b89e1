"""The fleet: every node's probe stream, supervised, merged into one view of the job.

One thread (the caller's) runs :meth:`Fleet.step`: a ``select`` over the stdout and stderr
pipes of the transport processes (ssh, srun, kubectl: children of ours; no socket is opened
here), non-blocking reads, lines cut and handed to each node's :class:`StreamSource`. Nothing a
node does can stall the others or the merge: a read never blocks, a line is capped, a node that
is silent past ``answer_timeout``, sends only garbage, dies, or speaks another schema is marked
so and its transport is restarted with exponential backoff (1 s, 2 s, 4 s ... 60 s), while
:meth:`merged` always returns at once with the latest readings of every node and each node's
status.

Statuses: ``connecting`` (started, nothing yet), ``ok``, ``late`` (no snapshot for
``late_after``), ``garbage`` (lines that are not snapshots), ``no-answer`` (nothing in
``answer_timeout``, or the transport failed before a snapshot), ``exited`` (died mid-stream),
``other-schema`` (a Denpex of another version).
"""

from __future__ import annotations

import json
import os
import re
import selectors
import socket
import time
from collections import deque
from dataclasses import dataclass, field

from denpex_tui.core.text import safe_str

from .channel import Channel
from .readings import SCHEMA, Snapshot, iso_time
from .skew import SkewEstimator
from .source import StreamSource
from .transports import ChannelSpec
from .wire import MAX_LINE, OTHER_SCHEMA, WireError

BACKOFF_MIN, BACKOFF_MAX = 1.0, 60.0
_LABEL = re.compile(rb"^\s*(\d{1,6}): ?(.*)$", re.S)
SRUN_CHUNK = 1024  # srun's I/O message size: longer lines arrive cut, each piece labelled
_SRUN_TASK = re.compile(r"srun: error: (\S+): tasks? ([0-9,-]+): (.*)")


def _complete(buf: bytearray) -> bool:
    """A line that is exactly one chunk long may be complete: it is when it is a JSON object."""
    if not buf.rstrip().endswith(b"}"):
        return False
    try:
        json.loads(bytes(buf))
        return True
    except ValueError:
        return False


@dataclass
class NodeState:
    node: str
    source: StreamSource
    channel: "Channel | None" = None
    started_at: float | None = None  # monotonic, this attempt
    last_snapshot_at: float | None = None  # monotonic
    answered_after: float | None = None  # seconds from the start of this attempt to its first snapshot
    snapshots_this_run: int = 0
    garbage_since_good: int = 0
    first_garbage: str | None = None
    ended: str | None = None  # why the last attempt ended
    ended_kind: str | None = None  # exited | no-answer | other-schema
    retries: int = 0  # consecutive failed attempts (the backoff's exponent); 0 after a snapshot
    restarts: int = 0  # every restart of its transport
    retry_at: float | None = None  # monotonic
    alone: bool = False  # retried with its own one-node channel (out of a labelled step)
    stderr: deque = field(default_factory=lambda: deque(maxlen=3))


class Fleet:
    def __init__(self, specs: list[ChannelSpec], *, interval: float = 2.0,
                 answer_timeout: float = 20.0, late_after: float | None = None,
                 clock=time.monotonic, wall=time.time) -> None:
        self.specs = specs
        self.interval = interval
        self.answer_timeout = answer_timeout
        self.late_after = late_after if late_after is not None else max(3 * interval, interval + 5)
        self.clock, self.wall = clock, wall
        self.skew = SkewEstimator()
        self.sel = selectors.DefaultSelector()
        self.nodes: dict[str, NodeState] = {}
        self._owner: dict[str, ChannelSpec] = {}
        self.channels: list[Channel] = []
        self.dying: list[Channel] = []  # ended, not reaped yet
        self.stray_lines = 0  # lines of a labelled step without a task label
        self._frozen: dict[str, tuple[str, str]] | None = None
        self._frozen_at: float | None = None
        for spec in specs:
            for n in spec.nodes:
                self.nodes[n] = NodeState(n, StreamSource(n, self.skew))
                self._owner[n] = spec

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        for spec in self.specs:
            self._start(spec, spec.nodes)

    def _start(self, spec: ChannelSpec, nodes: list[str]) -> None:
        now = self.clock()
        try:
            ch = Channel(spec, self.sel)
        except OSError as e:  # the transport tool is missing or not executable
            for n in nodes:
                self._ended(self.nodes[n], "no-answer", f"cannot start {spec.argv[0]}: {e.strerror or e}")
            return
        self.channels.append(ch)
        for n in nodes:
            st = self.nodes[n]
            st.channel, st.started_at, st.snapshots_this_run = ch, now, 0
            st.retry_at, st.garbage_since_good, st.first_garbage = None, 0, None

    def stop(self) -> None:
        """End every transport; the statuses stay as they were at this moment."""
        now = self.clock()
        self._frozen = {n: ((st.ended_kind or "no-answer", st.ended or "not started")
                            if st.channel is None else self.status(st, now))
                        for n, st in self.nodes.items()}
        self._frozen_at = now
        for ch in list(self.channels) + self.dying:
            ch.kill()
        self.channels.clear()
        self.dying.clear()
        for st in self.nodes.values():
            st.channel = None

    def _ended(self, st: NodeState, kind: str, why: str) -> None:
        st.channel = None
        st.ended_kind, st.ended = kind, why
        delay = BACKOFF_MAX if kind == OTHER_SCHEMA else min(BACKOFF_MAX, BACKOFF_MIN * 2 ** st.retries)
        st.retry_at = self.clock() + delay

    # -- the loop body ------------------------------------------------------------------------

    def step(self, timeout: float = 0.2) -> None:
        """Read what is there (at most ``timeout`` of waiting), then apply deadlines and retries."""
        try:
            events = self.sel.select(timeout) if self.sel.get_map() else []
        except (OSError, ValueError):
            events = []
        if not self.sel.get_map():
            time.sleep(min(timeout, 0.05))
        received = self.wall()
        for key, _mask in events:
            ch, kind = key.data
            f = key.fileobj
            if f.closed:  # its channel was ended by an earlier line of this round
                continue
            try:
                data = os.read(f.fileno(), 1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self._eof(ch, kind)
                ch.close_pipe(f)
                continue
            if kind == "out":
                self._stdout(ch, data, received)
            else:
                self._stderr(ch, data)
        self._reap_and_deadlines()

    def _stdout(self, ch: Channel, data: bytes, received: float) -> None:
        buf = ch.out
        buf += data
        while True:
            i = buf.find(b"\n")
            if i < 0:
                if len(buf) > MAX_LINE:
                    del buf[:]
                    if not ch.skipping:
                        ch.skipping = True
                        self._garbage_for(ch, b"", f"a line longer than {MAX_LINE} bytes")
                return
            line = bytes(buf[:i])
            del buf[: i + 1]
            if ch.skipping:
                ch.skipping = False
                continue
            self._line(ch, line, received)

    def _eof(self, ch: Channel, kind: str) -> None:
        if kind == "out" and ch.out.strip():
            # the stream ended inside a line: the node died while writing it
            self._garbage_for(ch, bytes(ch.out[:80]), "a truncated last line")
            del ch.out[:]

    def _line(self, ch: Channel, line: bytes, received: float) -> None:
        node = ch.spec.nodes[0]
        if ch.spec.labelled:
            m = _LABEL.match(line)
            if m is None or int(m.group(1)) >= len(ch.spec.nodes):
                self.stray_lines += 1  # srun's own words on stdout: no node to blame
                return
            task, part = int(m.group(1)), m.group(2)
            node = ch.spec.nodes[task]
            # srun cuts a task's output into chunks of 1024 bytes, each with its label: a full
            # chunk continues on the task's next labelled line
            pending = ch.pending.setdefault(task, bytearray())
            pending += part
            if len(part) >= SRUN_CHUNK and not _complete(pending):
                if len(pending) > MAX_LINE:
                    del pending[:]
                    return self._garbage_for(ch, b"", f"a line longer than {MAX_LINE} bytes", node)
                return
            line = bytes(pending)
            del pending[:]
        st = self.nodes[node]
        if st.channel is not ch:
            return  # a late line of a channel this node no longer uses
        try:
            st.source.feed(line, received)
        except WireError as e:
            if e.kind == OTHER_SCHEMA:
                self._kill_for(st, OTHER_SCHEMA,
                               f"its Denpex writes probe schema {safe_str(str(e.remote_schema))[:20]}, "
                               f"this one reads schema {SCHEMA}: install the same version on the nodes")
                return
            st.garbage_since_good += 1
            if st.first_garbage is None:
                st.first_garbage = f"{e}: {safe_str(line[:80].decode('utf-8', 'replace'))!s}"
            return
        st.last_snapshot_at = self.clock()
        if st.snapshots_this_run == 0 and st.started_at is not None:
            st.answered_after = st.last_snapshot_at - st.started_at
        st.snapshots_this_run += 1
        st.garbage_since_good = 0
        st.retries = 0
        st.ended = st.ended_kind = None

    def _garbage_for(self, ch: Channel, line: bytes, why: str, node: str | None = None) -> None:
        """A bad line of one node (``node``, else the channel's only node)."""
        if node is None:
            if ch.spec.labelled:
                self.stray_lines += 1
                return
            node = ch.spec.nodes[0]
        st = self.nodes[node]
        if st.channel is ch:
            st.garbage_since_good += 1
            st.source.garbage += 1
            if st.first_garbage is None:
                st.first_garbage = why + (f": {safe_str(line.decode('utf-8', 'replace'))[:80]}"
                                          if line else "")

    def _stderr(self, ch: Channel, data: bytes) -> None:
        ch.err += data
        *lines, rest = bytes(ch.err).split(b"\n")
        ch.err[:] = rest[-4096:]
        for raw in lines:
            text = safe_str(raw.decode("utf-8", "replace").strip())[:200]
            if not text:
                continue
            m = _SRUN_TASK.search(text) if ch.spec.labelled else None
            if m and m.group(1) in self.nodes:
                st = self.nodes[m.group(1)]
                if st.channel is ch:  # one task of the step died: retry that node on its own
                    st.stderr.append(text)
                    kind = "exited" if st.snapshots_this_run else "no-answer"
                    self._ended(st, kind, m.group(3)[:120])
                    st.alone = ch.spec.retry_one is not None
                continue
            for n in ch.spec.nodes:
                if self.nodes[n].channel is ch:
                    self.nodes[n].stderr.append(text)

    def _kill_for(self, st: NodeState, kind: str, why: str) -> None:
        ch = st.channel
        self._ended(st, kind, why)
        if ch is not None and not any(s.channel is ch for s in self.nodes.values()):
            self._retire(ch)

    def _retire(self, ch: Channel) -> None:
        """End a channel without waiting for it: SIGTERM now, reaped (or SIGKILLed) later."""
        ch.kill(wait=False)
        if ch in self.channels:
            self.channels.remove(ch)
        if ch not in self.dying:
            self.dying.append(ch)

    def _reap_and_deadlines(self) -> None:
        now = self.clock()
        by_channel: dict[int, list[NodeState]] = {}
        for s in self.nodes.values():
            if s.channel is not None:
                by_channel.setdefault(id(s.channel), []).append(s)
        for ch in list(self.channels):
            users = [s for s in by_channel.get(id(ch), ()) if s.channel is ch]
            if ch.proc.poll() is not None and (ch.open_pipes == 0 or not users):
                for f in (ch.proc.stdout, ch.proc.stderr):
                    if not f.closed:  # drain what the pipe still holds
                        try:
                            while (data := os.read(f.fileno(), 1 << 16)):
                                (self._stdout(ch, data, self.wall()) if f is ch.proc.stdout
                                 else self._stderr(ch, data))
                        except OSError:
                            pass
                        self._eof(ch, "out" if f is ch.proc.stdout else "err")
                        ch.close_pipe(f)
                rc = ch.proc.returncode
                for st in [s for s in users if s.channel is ch]:
                    tail = "; ".join(st.stderr) or "no message"
                    if st.snapshots_this_run:
                        self._ended(st, "exited", f"died mid-stream (exit {rc}: {tail})")
                    elif st.garbage_since_good:
                        self._ended(st, "no-answer", f"exited (exit {rc}) after {st.garbage_since_good} "
                                    f"lines that are not snapshots ({st.first_garbage})")
                    else:
                        self._ended(st, "no-answer", f"exited before answering (exit {rc}: {tail})")
                self.channels.remove(ch)
                continue
            if not users:
                self._retire(ch)
                continue
            for st in users:
                if st.last_snapshot_at is None or st.snapshots_this_run == 0:
                    if st.started_at is not None and now - st.started_at > self.answer_timeout:
                        what = "only garbage" if st.garbage_since_good else "no snapshot"
                        self._kill_for(st, "no-answer", f"{what} in {self.answer_timeout:g} s")
                elif now - st.last_snapshot_at > max(self.answer_timeout, 2 * self.late_after):
                    # streamed, then went silent (a hung node, a task that ended quietly)
                    st.alone = ch.spec.labelled and ch.spec.retry_one is not None
                    self._kill_for(st, "late", f"silent for {now - st.last_snapshot_at:.0f} s "
                                               "after streaming; restarted")
            if ch.spec.labelled and all(s.channel is not ch for s in users):
                self._retire(ch)
        self.dying = [ch for ch in self.dying if not ch.reap()]
        # retries: a labelled step's node alone, or its whole channel again
        due: dict[int, tuple[ChannelSpec, list[str]]] = {}
        for st in self.nodes.values():
            if st.channel is None and st.retry_at is not None and now >= st.retry_at:
                st.retries += 1
                st.restarts += 1
                spec = self._owner[st.node]
                if spec.labelled and (st.alone or any(
                        s.channel is not None for s in self.nodes.values() if s.node in spec.nodes)):
                    st.alone = True
                    one = spec.retry_one(st.node) if spec.retry_one else None
                    if one is not None:
                        self._start(one, [st.node])
                        continue
                due.setdefault(id(spec), (spec, []))[1].append(st.node)
        for spec, nodes in due.values():
            self._start(spec, nodes if not spec.labelled else spec.nodes)

    # -- views --------------------------------------------------------------------------------

    def status(self, st: NodeState, now: float | None = None) -> tuple[str, str]:
        if self._frozen is not None and st.node in self._frozen:
            return self._frozen[st.node]
        now = self.clock() if now is None else now
        if st.channel is None:
            kind = st.ended_kind or "no-answer"
            wait = max(0.0, (st.retry_at or now) - now)
            return kind, f"{st.ended or 'not started'}; retry in {wait:.0f} s (attempt {st.retries + 1})"
        if st.last_snapshot_at is None or st.snapshots_this_run == 0:
            if st.garbage_since_good:
                return "garbage", f"{st.garbage_since_good} lines that are not snapshots ({st.first_garbage})"
            waited = now - (st.started_at or now)
            if st.ended_kind is not None:  # a retry: the node still has not answered since it failed
                return st.ended_kind, (f"{st.ended}; retrying: waited {waited:.0f} s so far "
                                       f"(attempt {st.retries + 1})")
            return "connecting", f"waiting {waited:.0f} s for a first snapshot"
        age = now - st.last_snapshot_at
        if age > self.late_after:
            extra = f", then {st.garbage_since_good} garbage lines" if st.garbage_since_good else ""
            return ("garbage" if st.garbage_since_good else "late"), f"last snapshot {age:.0f} s ago{extra}"
        if st.garbage_since_good:
            return "ok", f"{st.garbage_since_good} garbage lines since the last snapshot"
        if st.answered_after is not None and st.answered_after > self.late_after:
            return "ok", f"answered late: first snapshot after {st.answered_after:.0f} s"
        return "ok", ""

    def settled(self) -> bool:
        """Every node has answered or failed (nobody is still connecting for the first time)."""
        return all(self.status(st)[0] != "connecting" for st in self.nodes.values())

    def node_json(self, now: float | None = None) -> list[dict]:
        now = self._frozen_at or self.clock() if now is None else now
        out = []
        for st in self.nodes.values():
            status, detail = self.status(st, now)
            snap = st.source.snapshot()
            off = self.skew.offset(st.node)
            out.append({
                "node": st.node, "status": status, "detail": detail,
                "host": snap.host if snap else None,
                "snapshots": st.source.snapshots, "garbage_lines": st.source.garbage,
                "age_s": None if st.last_snapshot_at is None else round(now - st.last_snapshot_at, 3),
                "retries": st.retries, "restarts": st.restarts,
                "answered_after_s": None if st.answered_after is None else round(st.answered_after, 3),
                "transport": (st.channel.spec.label if st.channel else self._owner[st.node].label),
                "clock": off.to_json() if off else None,
                "stderr": list(st.stderr),
            })
        return out

    def merged(self) -> Snapshot:
        """Every node's latest readings in one Snapshot, each entry tagged with its node."""
        procs, paths = [], []
        files_open = files_max = None
        for st in self.nodes.values():
            snap = st.source.snapshot()
            if snap is None:
                continue
            procs.extend(snap.processes)
            paths.extend(snap.paths)
        return Snapshot(time=self.wall(), host=socket.gethostname(), processes=procs, paths=paths,
                        discovered=True, system_files_open=files_open, system_files_max=files_max)

    def merged_json(self) -> dict:
        snap = self.merged()
        d = snap.to_json()
        d.pop("note", None)
        d.pop("system", None)  # per node: see nodes[].system
        d["merged"] = True
        d["nodes"] = self.node_json()
        for n in d["nodes"]:
            s = self.nodes[n["node"]].source.snapshot()
            n["system"] = ({"files_open": s.system_files_open, "files_max": s.system_files_max}
                           if s else None)
            n["time"] = iso_time(s.time) if s else None
        res = self.skew.resolution()
        offs = [o.offset_s for o in self.skew.offsets().values()]
        d["clock"] = {"offsets": self.skew.to_json(),
                      "spread_s": round(max(offs) - min(offs), 4) if offs else None,
                      "order_uncertain_below_s": None if res is None else round(res, 4),
                      "note": "offset_s: head clock minus node clock, the minimum over samples of "
                              "receive time minus the node's send time; failures on two nodes "
                              "closer than order_uncertain_below_s (after correcting by the "
                              "offsets) cannot be ordered by their timestamps"}
        return d

    def source(self, node: str) -> StreamSource | None:
        st = self.nodes.get(node)
        return st.source if st else None


__all__ = ["Fleet", "NodeState", "BACKOFF_MIN", "BACKOFF_MAX"]
