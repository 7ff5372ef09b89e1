"""Where readings come from: this machine, or another node's ``denpex probe --stream``.

A :class:`ProbeSource` has three operations, and the differential and the gauges use nothing
else, so they are pure functions of snapshots wherever those were taken:

* ``snapshot()``: a :class:`Snapshot` (a local source measures now; a stream source returns the
  latest line it received, ``None`` before the first);
* ``read_path(path)``: a reading of a path that the snapshot lacks;
* ``du(mount_point)``: the allocated bytes under a filesystem (for the df-du gap).

:class:`LocalSource` measures here. :class:`StreamSource` is fed the lines a remote node's probe
prints (through whatever transport) and only knows what those lines say: a path the remote probe
does not watch, or a du of a remote filesystem, is reported as not measured, with the reason,
never measured here instead (the head node's disk is not the compute node's).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Protocol

from .mounts import is_under
from .readings import PathReading, Snapshot
from .wire import GARBAGE, OTHER_SCHEMA, WireError, parse_line


class ProbeSource(Protocol):
    name: str
    remote: bool  # readings of another node (never completed from this machine)

    def snapshot(self) -> Snapshot | None: ...

    def read_path(self, path: str) -> PathReading: ...

    def du(self, mount_point: str): ...  # -> du.DuResult


class LocalSource:
    """This machine: a :class:`~.sampler.Prober`, ``sampler.read_path``, a bounded du walk."""

    remote = False

    def __init__(self, prober=None, name: str | None = None) -> None:
        from .sampler import Prober

        self.prober = prober if prober is not None else Prober()
        self.name = name or self.prober.host

    def snapshot(self) -> Snapshot:
        return self.prober.snapshot()

    def read_path(self, path: str) -> PathReading:
        from .sampler import read_path

        return read_path(path, mounts=self.prober.mounts)

    def du(self, mount_point: str):
        from .du import du_filesystem

        return du_filesystem(mount_point)


class StreamSource:
    """One remote node, fed the lines of its ``denpex probe --stream --json``.

    ``feed(line, received)`` parses a line (``received``: the head node's wall clock when it
    arrived) and keeps the latest snapshot; it returns the snapshot, or raises
    :class:`~.wire.WireError` (garbage, another schema, invalid) after counting it. Every good
    line is also a clock sample: the node's sent time against the receive time."""

    remote = True

    def __init__(self, name: str, skew=None) -> None:
        from .skew import SkewEstimator

        self.name = name
        self.skew = skew if skew is not None else SkewEstimator()
        self._last: Snapshot | None = None
        self.received_at: float | None = None
        self.snapshots = 0
        self.garbage = 0
        self.invalid = 0
        self.remote_schema: object = None  # set when the node speaks another schema
        self.last_error: str | None = None

    def feed(self, line: bytes | str, received: float | None = None) -> Snapshot:
        received = time.time() if received is None else received
        try:
            snap = parse_line(line)
        except WireError as e:
            if e.kind == OTHER_SCHEMA:
                self.remote_schema = e.remote_schema
            elif e.kind == GARBAGE:
                self.garbage += 1
            else:
                self.invalid += 1
            self.last_error = str(e)
            raise
        for p in snap.processes:
            p.node = self.name
        for p in snap.paths:
            p.node = self.name
        # the node stamps the time it started measuring; it wrote the line cost_s later
        sent = snap.time + (snap.cost_s or 0.0)
        self.skew.sample(self.name, sent, received)
        self._last = snap
        self.received_at = received
        self.snapshots += 1
        self.remote_schema = None
        return snap

    def snapshot(self) -> Snapshot | None:
        return self._last

    def read_path(self, path: str) -> PathReading:
        """The node's reading of ``path``, or of the watched path it lies under when no mount
        the node reported sits in between (the same filesystem as far as the node told us)."""
        snap = self._last
        if snap is not None:
            for p in snap.paths:
                if p.path == path or p.measured_path == path:
                    return p
            # not "/": every path is under it, and a disk the node did not report (an nvme
            # mount) would be taken for the root filesystem
            under = [p for p in snap.paths if p.error is None and p.measured_path
                     and p.measured_path != "/" and is_under(path, p.measured_path)]
            if under:
                best = max(under, key=lambda p: len(p.measured_path or ""))
                mounts = {p.mount for p in snap.paths if p.mount}
                deeper = [m for m in mounts if is_under(path, m) and len(m) > len(best.measured_path or "")]
                if not deeper:
                    r = dataclasses.replace(best, path=path, exists=None,
                                            why=[f"on the filesystem of {best.path} (watched on {self.name})"])
                    return r
        return PathReading(path=path, node=self.name,
                           error=f"not watched by the probe on {self.name} "
                                 "(give it --path or --logs there)")

    def du(self, mount_point: str):
        from .du import DuResult

        return DuResult(None, 0, f"on {self.name}: du walks a filesystem on its own node; "
                                 f"run denpex probe there with --logs", time.time())


__all__ = ["ProbeSource", "LocalSource", "StreamSource"]
