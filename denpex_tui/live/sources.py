"""What a followed source turns into, and the I/O calls every file source makes.

Public types
------------
``Chunk``        whole lines read from one source (a file or an ``--exec`` command).
``SourceEvent``  something happened to a source: ``added``, ``rotated``, ``truncated``,
                 ``replaced``, ``deleted``, ``error``, ``possibly-lost`` (and ``exited``
                 for command sources).
``PollResult``   what one blocking ``poll`` of a source produced.

The sources themselves:

* ``live/follower.py``  ``FileFollower`` follows one path: opening it by name, and what
  happens when the file under the name changes (rotation, replacement, deletion and the
  linger of the old file, errors); ``live/truncation.py`` finds where to read again after
  a truncation or a rewrite in place.
* ``live/openfile.py``  ``OpenFile``: one open inode and the reading of it (whole lines,
  the line-length cap, NUL bytes and holes, partial lines).
* ``live/dirwatch.py``  ``DirWatch``, ``SourceSpec``/``expand_spec``, ``classify_name``:
  directories and globs.

Everything is synchronous and single-threaded per object: the ``Tailer`` never polls the
same object from two threads at once.  See docs/live-engine.md.
"""

from __future__ import annotations

import os
import stat as stat_mod
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Chunk",
    "SourceEvent",
    "PollResult",
    "NotRegularFile",
    "Scheduled",
    "MAX_LINE",
    "READ_CHUNK",
]

HEAD_BYTES = 1024  # head fingerprint: first KiB of the file
OVERLAP = 4096  # bytes before our offset re-read with every read to verify continuity
CKPT_SAMPLE = 256  # bytes before a line-boundary checkpoint kept to verify it
MTIME_SLACK_S = 2.0  # a write this close to the last mtime may not change it (timestamp tick)
MAX_LINE = 1 << 20  # a line longer than this is emitted in pieces of this size
READ_CHUNK = 8 << 20  # largest single read (history and catch-up)
NUL_HOLD_S = 1.0  # NUL bytes at the end of a read are held back this long (NFS holes)
LINGER_S = 10.0  # an old (rotated/deleted) file is still followed until quiet this long
PARTIAL_TIMEOUT_S = 5.0  # a partial line is flushed after the file is quiet this long
NAME_CHECK_MIN_S = 1.0  # stat by name at most this often while the file is quiet ...
NAME_CHECK_MAX_S = 10.0  # ... and at least this often even while it grows
NAME_CHECK_WATCHED_S = 60.0  # with an inotify watch on a local filesystem (safety net)
RETRY_S = 30.0  # retry period for paths in error (permission denied, FIFO, ...)
AWAIT_NAME_S = 30.0  # after a rename, look for the new file at the name this long, fast
MAX_CKPTS = 16

O_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)

# Indirections so tests can simulate a hung or failing mount (monkeypatch these): the
# file sources call them through this module (``sources.os_stat(...)``), once per system
# call, never per line.
os_stat = os.stat
os_fstat = os.fstat
os_open = os.open
os_pread = os.pread
os_scandir = os.scandir


@dataclass(slots=True)
class Chunk:
    """Whole lines from one source.

    ``data`` always ends with ``b"\\n"``.  ``offset`` is the byte offset of ``data[0]``
    in the file (for ``kind == "exec"``: bytes read from the command so far).  After a
    rotation the offset starts again at 0; after a truncation it is where reading resumed,
    the line boundary before the first changed byte (a ``SourceEvent`` says why).

    ``history``      the bytes were in the file when it was first opened at start-up
                     (the fast history scan), not appended while following.
    ``partial_end``  the last line was not terminated in the source: Denpex added the
                     final ``b"\\n"`` (rotation, truncation, a line longer than
                     ``MAX_LINE``, a partial line quiet for ``PARTIAL_TIMEOUT_S``, end of
                     a command's output).
    ``continues``    the first line continues a line whose earlier piece was emitted
                     with ``partial_end`` (only for lines split by the length cap or a
                     partial-line timeout; never guessed across files).
    ``note``         human-readable reason for the flags, or provenance (e.g. bytes
                     recovered from ``x.log.1`` after a copytruncate).
    ``rank``         rank given on the command line for an ``--exec N=...`` source.
    """

    source_id: str
    path: str
    data: bytes
    offset: int
    kind: str = "file"
    history: bool = False
    partial_end: bool = False
    continues: bool = False
    note: str = ""
    rank: int | None = None


@dataclass(slots=True)
class SourceEvent:
    """A change of a source's state; ``to_dict`` gives the timeline event."""

    path: str
    state: str
    detail: str = ""
    source_id: str = ""
    time: float = field(default_factory=time.time)
    kind: str = "file"

    def to_dict(self) -> dict[str, Any]:
        return {"event": "source", "path": self.path, "state": self.state, "detail": self.detail}


class NotRegularFile(OSError):
    pass


class Scheduled:
    """The Tailer's scheduling state of one followed thing (a file or a directory): owned by the
    Tailer (live/scheduler.py), the defaults here until it sets them."""

    lane: Any = None  # the lane (local, network, hung) it is polled in
    interval = 0.0  # seconds between its polls now
    next_due = 0.0  # when (monotonic) it is polled next
    seq = 0  # its place in the due heap (a newer entry supersedes older ones)
    inflight = False  # a poll of it runs in a worker thread
    queued = False  # it waits in its lane's queue
    hung_reported = False  # a poll that did not return was reported once
    force_name_check = False  # check its name at the next poll (a directory event said so)


@dataclass(slots=True)
class PollResult:
    """What one ``poll`` produced (filled in a worker thread, read on the loop)."""

    budget: int = READ_CHUNK
    items: list = field(default_factory=list)
    calls: int = 0  # metadata calls made (stat, fstat, open, listdir)
    nbytes: int = 0
    more: bool = False  # data left to read: poll again at once
    active: bool = False  # new data was read
    hold: bool = False  # something is held back briefly (NUL bytes): poll again soon
    done: bool = False  # remove this pollable
    hint: float | None = None  # do not poll again before this many seconds (errors)
    discovered: list = field(default_factory=list)  # DirWatch: [(path, history_only, startup, explicit, link)]
    new_dirs: list = field(default_factory=list)  # DirWatch: [DirWatch]


def kind_of(mode: int) -> str:
    if stat_mod.S_ISFIFO(mode):
        return "a FIFO"
    if stat_mod.S_ISDIR(mode):
        return "a directory"
    if stat_mod.S_ISCHR(mode):
        return "a character device"
    if stat_mod.S_ISBLK(mode):
        return "a block device"
    if stat_mod.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"
