"""Clock skew between the job's nodes, from the probe streams alone (no NTP query, no socket).

Every streamed snapshot carries the node's own clock at sending (``unix_time`` + ``cost_ms``);
the head node notes its clock when the line arrives. ``received - sent`` is the node's offset
(how far the head's clock is ahead of the node's) plus the one-way delay of that line. The delay
is never negative, so the minimum over many samples is the best estimate of the offset, too high
by the smallest delay seen (milliseconds over ssh or srun on a cluster network). The spread of
the samples (median minus minimum) is kept as the estimate's uncertainty.

To put a node's log time on the head's clock: ``t_head = t_node + offset``. When two failures on
two nodes are closer together than the two offsets' uncertainties allow, their order is not
decidable from the timestamps and :meth:`SkewEstimator.compare` says so.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass

WINDOW = 64  # samples kept per node (the minimum of a sliding window follows a drifting clock)
FLOOR_S = 0.005  # never claim to know an offset better than 5 ms (one-way delay, timer grain)


@dataclass(frozen=True)
class NodeOffset:
    node: str
    offset_s: float  # head clock minus node clock (add to a node time to get head time)
    uncertainty_s: float
    samples: int

    def to_json(self) -> dict:
        u = None if math.isinf(self.uncertainty_s) else round(self.uncertainty_s, 4)
        return {"offset_s": round(self.offset_s, 4), "uncertainty_s": u, "samples": self.samples}


@dataclass(frozen=True)
class Ordering:
    first: str | None  # the node whose event came first on the head's clock (None: undecided)
    gap_s: float  # corrected time difference, second minus first (>= 0)
    uncertain: bool  # the gap is within the clocks' uncertainty
    reason: str

    def to_json(self) -> dict:
        return {"first": self.first, "gap_s": round(self.gap_s, 4), "uncertain": self.uncertain,
                "reason": self.reason}


class SkewEstimator:
    """Offsets per node name, from (sent, received) samples."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self._samples: dict[str, deque[float]] = {}

    def sample(self, node: str, sent: float, received: float) -> None:
        d = self._samples.get(node)
        if d is None:
            d = self._samples[node] = deque(maxlen=self.window)
        d.append(received - sent)

    def offset(self, node: str) -> NodeOffset | None:
        d = self._samples.get(node)
        if not d:
            return None
        lo = min(d)
        spread = statistics.median(d) - lo if len(d) > 1 else float("inf")
        return NodeOffset(node, lo, max(FLOOR_S, spread), len(d))

    def offsets(self) -> dict[str, NodeOffset]:
        """Every node with at least one sample: the API the triage uses to order failures."""
        return {n: o for n in self._samples if (o := self.offset(n)) is not None}

    def to_head_time(self, node: str, t: float) -> float | None:
        o = self.offset(node)
        return None if o is None else t + o.offset_s

    def compare(self, node_a: str, t_a: float, node_b: str, t_b: float) -> Ordering:
        """Which of two events, each stamped by its own node's clock, happened first."""
        return compare(self.offsets(), node_a, t_a, node_b, t_b)

    def to_json(self) -> dict:
        return {n: o.to_json() for n, o in sorted(self.offsets().items())}

    def resolution(self) -> float | None:
        return resolution(self.offsets())


def resolution(offsets: dict[str, NodeOffset]) -> float | None:
    """Failures on two nodes closer together than this cannot be ordered by their timestamps
    (the two largest uncertainties; None: some node has one sample only)."""
    us = sorted((o.uncertainty_s for o in offsets.values()), reverse=True)
    if len(us) < 2:
        return 0.0 if us and not math.isinf(us[0]) else None
    r = us[0] + us[1]
    return None if math.isinf(r) else r


def compare(offsets: dict[str, NodeOffset], node_a: str, t_a: float, node_b: str,
            t_b: float) -> Ordering:
    """``SkewEstimator.compare`` on a copy of its offsets (safe to use from another thread)."""
    oa, ob = offsets.get(node_a), offsets.get(node_b)
    if node_a == node_b:
        first = node_a if t_a <= t_b else node_b
        return Ordering(first, abs(t_b - t_a), False, "same node: same clock")
    if oa is None or ob is None:
        missing = node_a if oa is None else node_b
        return Ordering(None, abs(t_b - t_a), True,
                        f"no clock sample from {missing} yet: its offset is unknown")
    ha, hb = t_a + oa.offset_s, t_b + ob.offset_s
    margin = oa.uncertainty_s + ob.uncertainty_s
    gap = abs(hb - ha)
    first = node_a if ha <= hb else node_b
    if math.isinf(margin):
        return Ordering(None, gap, True, "one clock sample only: the offset's spread is unknown")
    if gap <= margin:
        return Ordering(None, gap, True,
                        f"{gap * 1000:.0f} ms apart after correcting the clocks, within their "
                        f"uncertainty of {margin * 1000:.0f} ms")
    raw_first = node_a if t_a <= t_b else node_b
    why = f"{gap * 1000:.0f} ms apart on the head's clock (uncertainty {margin * 1000:.0f} ms)"
    if raw_first != first:
        why += "; the nodes' own timestamps give the other order"
    return Ordering(first, gap, False, why)


__all__ = ["SkewEstimator", "NodeOffset", "Ordering", "compare", "resolution"]
