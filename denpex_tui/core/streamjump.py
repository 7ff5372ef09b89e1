"""Which lines of a console chunk can touch the tracebacks open in it.

While a traceback is open the pipeline reads its stream's lines one by one (each may continue
it or end it). In a console those lines are interleaved with every other stream's, and a rank
whose traceback was its last word leaves it open until :data:`tracebacks.QUIET_LINES` lines have
passed: 20,000 lines of other ranks through the door, one by one, for nothing (a job's logs
concatenated into one file spent 4.8 s of 6.4 s there). A line can touch an open traceback only
if it is of that traceback's stream, or a candidate line (which the pipeline reads anyway): the
chunk's streams come from the door once per distinct line head (``console_streams``), so the
pipeline jumps from one such line to the next."""

from __future__ import annotations

from .lines import npy as np
from .lines.chunk import console_streams, line_starts
from .lines.formats import FORMATS, active_formats

JUMP_MIN_BYTES = 1 << 16  # a smaller chunk is cheaper read line by line
# The streams a line's launcher labels name (a local rank, an srun task, a global rank): the
# heads tell those exactly. A host's stream (an NCCL 'host:pid:tid' prefix) and no stream at all
# are read from more of the line than its head, so a traceback open on one is read line by line.
LABEL_KINDS = frozenset("ltg")


def covers(keys) -> bool:
    """Whether the jump can serve tracebacks open on these streams. Not under a user's prefix
    template: the heads say nothing then, and the chunk's every line would go through the door
    (more than the line-by-line read it saves)."""
    return active_formats() == FORMATS and all(k is not None and k[0] in LABEL_KINDS for k in keys)


class StreamLines:
    """The line starts of one console chunk, by stream (``LineFacts.stream_key``)."""

    def __init__(self, data: bytes):
        self.starts = line_starts(data)
        ids, keys = console_streams(data, self.starts)
        self._ids = ids
        self._num = {k: i for i, k in enumerate(keys)}
        self._at: dict[int, object] = {}

    def lines_of(self, key) -> np.ndarray:
        """The starts of the chunk's lines of stream ``key``, in order."""
        i = self._num.get(key)
        if i is None:
            return self.starts[:0]
        at = self._at.get(i)
        if at is None:
            at = self._at[i] = self.starts[self._ids == i]
        return at

    def next_of(self, keys, pos: int) -> int:
        """The start of the first line at or after byte ``pos`` whose stream is one of
        ``keys``; -1: none in this chunk."""
        best = -1
        for k in keys:
            at = self.lines_of(k)
            j = int(np.searchsorted(at, pos))
            if j < len(at):
                v = int(at[j])
                if best < 0 or v < best:
                    best = v
        return best
