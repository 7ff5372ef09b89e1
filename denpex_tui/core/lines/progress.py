"""How far a line says its rank got: the progress counter it shows.

Part of the line-facts door (:mod:`~denpex_tui.core.lines.facts` exports it): the counter of a
progress bar or a step line, read from what a terminal would show of the line. A tqdm bar
redraws itself with carriage returns (``\\r  5%|▌  | 21/400 [00:00<00:12, 30.72it/s]\\r  7%|...``)
and never writes a newline until it closes, so a whole rank log can be one "line" of a hundred
redraws: the counter is read from its **last** carriage-return segment, the bar as last drawn.

Shapes, each from real logs (``tests/test_progress_marks.py``):

* tqdm (HF Trainer, Lightning, accelerate, plain loops): ``N/T [elapsed<remaining, rate]`` and
  the first draw's ``0/400 [00:00<?, ?it/s]``;
* step lines: ``step 30/200``, ``global_step60``, ``global step 1200``, ``Step: 10``,
  Megatron's `` iteration      100/  500000 |``.

A counter with a total (``N/T``) can be compared with another rank's counter of the same total
(the same loop); a bare step number with another bare step number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Progress", "line_progress", "shown_segment", "PROGRESS_NEEDLES"]

_N = rb"\d{1,12}"
# tqdm: "21/400 [00:00<00:12, 30.72it/s]", "0/400 [00:00<?, ?it/s]", "31/67 [29:02<35:12, 58.67s/it]"
_TQDM = re.compile(rb"(?<![\d./])(" + _N + rb")/(" + _N + rb") \[(?:\d|\?)")
_STEP = re.compile(
    rb"(?<![\w.])(?:global[_ ]step|[Ss]tep|iteration)(?:[ =:]+|_0*|(?<=step))(" + _N
    + rb")(?:\s*/\s*(" + _N + rb"))?(?![\w.])")

# Literals one of which every progress line holds: found with bytes.rfind (C) before any line is
# parsed.
PROGRESS_NEEDLES = (b"it/s]", b"s/it]", b"step", b"Step", b"iteration")


@dataclass(frozen=True, slots=True)
class Progress:
    step: int
    total: int | None  # the counter's total (N/T), when the line shows one
    kind: str  # "bar" (tqdm) | "step"

    def comparable(self, other: "Progress") -> bool:
        """Two counters of the same loop: same kind and the same total."""
        return self.kind == other.kind and self.total == other.total


def _last(rx: re.Pattern[bytes], seg: bytes) -> re.Match[bytes] | None:
    m = None
    for m in rx.finditer(seg):
        pass
    return m


def shown_segment(raw: bytes) -> bytes:
    """What a terminal shows of a line redrawn with carriage returns: its last CR segment."""
    seg = raw.rstrip(b"\r")
    cut = seg.rfind(b"\r")
    return seg[cut + 1:] if cut >= 0 else seg


def line_progress(raw: bytes) -> Progress | None:
    """The progress counter a line (as written, without its newline) shows in its last
    carriage-return segment, or None."""
    seg = shown_segment(raw)
    if len(seg) > 4096:
        seg = seg[-4096:]
    m = _last(_TQDM, seg)
    if m is not None:
        n, t = int(m.group(1)), int(m.group(2))
        if t > 0 and n <= t:
            return Progress(n, t, "bar")
    m = _last(_STEP, seg)
    if m is not None:
        n = int(m.group(1))
        t = int(m.group(2)) if m.group(2) else None
        if t is None or (t > 0 and n <= t):
            return Progress(n, t, "step")
    return None
