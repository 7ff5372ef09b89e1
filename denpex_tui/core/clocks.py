"""Whether the nodes' clocks can be trusted to order failures across nodes.

The rule: a job starts on every node at about the same moment (the rendezvous) and ends on
every node at about the same moment (the agents tear down together). A node whose first *and*
last timestamps are both shifted from the other nodes' by about the same amount has a skewed
clock, not a different history; its offset is the mean of the two shifts. A node whose only
last timestamp differs (it stopped early, it hung) is not skewed. With two nodes the median is
their midpoint, so each is given half the difference; only the difference matters for order.

Offsets are used to compare times across nodes, and the evidence says the clocks were not
trusted. Within one node, order never depends on this.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

__all__ = ["ClockCheck", "check_clocks", "SKEW_THRESHOLD_S"]

SKEW_THRESHOLD_S = 5.0


@dataclass
class ClockCheck:
    offsets: dict[str, float]  # node_key -> seconds its clock is ahead (subtract to compare)
    notes: list[str]

    def adjust(self, node_key: str | None, ts: float | None) -> float | None:
        if ts is None:
            return None
        return ts - self.offsets.get(node_key or "", 0.0)


def check_clocks(node_times: dict[str, tuple], names: dict[str, str | None] | None = None) -> ClockCheck:
    """``node_times``: node_key -> (first, last) datetimes (either may be None)."""
    firsts = {k: v[0].timestamp() for k, v in node_times.items() if v[0] is not None}
    lasts = {k: v[1].timestamp() for k, v in node_times.items() if v[1] is not None}
    both = sorted(set(firsts) & set(lasts))
    if len(both) < 2:
        return ClockCheck({}, [])
    mf = median(firsts[k] for k in both)
    ml = median(lasts[k] for k in both)
    offsets: dict[str, float] = {}
    notes: list[str] = []
    for k in both:
        df, dl = firsts[k] - mf, lasts[k] - ml
        if abs(df) < SKEW_THRESHOLD_S or abs(dl) < SKEW_THRESHOLD_S or (df > 0) != (dl > 0):
            continue
        if abs(df - dl) > max(SKEW_THRESHOLD_S, 0.25 * max(abs(df), abs(dl))):
            continue
        offsets[k] = (df + dl) / 2
    for k, off in sorted(offsets.items(), key=lambda kv: -abs(kv[1])):
        name = (names or {}).get(k) or k
        notes.append(
            f"node {name}'s clock reads about {abs(off):.0f} s {'ahead of' if off > 0 else 'behind'} the others "
            "(its first and last lines are both shifted): clocks not trusted, times across nodes compared after "
            "correcting for it"
        )
    return ClockCheck(offsets, notes)
