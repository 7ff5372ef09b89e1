"""The shape of a failure across ranks: what every rank's report says together.

Some failures are reported by every rank, each in its own words about itself, and no single line
names the culprit. The shape of the reports does:

* **the odd one out**: TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprint check makes every rank raise
  ``Detected mismatch between collectives on ranks. Rank 2 is running collective:
  CollectiveFingerPrint(...), but Rank 3 is running collective: CollectiveFingerPrint(...)``.
  Each report states two ranks' fingerprints (sequence number, op, tensor shapes, dtypes);
  together they give every rank's, and the rank whose fingerprint differs from the one a strict
  majority of the others share is the cause (:func:`odd_rank`). The other ranks' reports, and any
  later failure of theirs in the episode, are collateral.
* **alike**: the same error, from processes that carry no rank label, several times in one file
  (tracebacks interleaved character by character, one per spawned process): several processes
  failed the same way, and none of them is first (:func:`alike_evidence`).

Ranks failing of one signature at about the same time are one node- or filesystem-level cause
(rule 4 of the triage); these shapes come first because the reports say more than the clock.
"""

from __future__ import annotations

import re

from .model import Finding
from .ranks import rank_ranges

__all__ = ["odd_rank", "fingerprints", "alike_evidence"]

_FP = re.compile(r"Rank (\d{1,7}) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d+), OpType=(\w+)"
                 r"(?:, TensorShape=\[([^\]]*)\])?(?:, TensorDtypes=(\w+))?")


def fingerprints(texts) -> dict[int, tuple]:
    """rank -> (sequence, op, shapes, dtypes) as the reports state them (a rank stated
    differently by two reports is dropped: the reports disagree about it)."""
    out: dict[int, tuple] = {}
    bad: set[int] = set()
    for t in texts:
        for m in _FP.finditer(t):
            r = int(m.group(1))
            fp = (m.group(2), m.group(3), (m.group(4) or "").replace(" ", ""), m.group(5) or "")
            if r in out and out[r] != fp:
                bad.add(r)
            out.setdefault(r, fp)
    return {r: fp for r, fp in out.items() if r not in bad}


def odd_rank(findings: list[Finding]) -> tuple[int, str] | None:
    """(rank, why) of the one rank whose collective differs from the majority's, or None."""
    fps = fingerprints(f.text for f in findings)
    if len(fps) < 3:
        return None
    counts: dict[tuple, list[int]] = {}
    for r, fp in fps.items():
        counts.setdefault(fp, []).append(r)
    if len(counts) != 2:
        return None
    (maj, mranks), (odd, oranks) = sorted(counts.items(), key=lambda kv: -len(kv[1]))
    if len(oranks) != 1 or len(mranks) < 2:
        return None
    r = oranks[0]
    why = (f"every rank's report states the ranks' collective fingerprints: rank {r} runs {odd[1]} with shapes "
           f"[{odd[2]}] {odd[3]} at sequence {odd[0]}, ranks {rank_ranges(mranks)} run {maj[1]} [{maj[2]}] {maj[3]}: "
           f"rank {r} differs from the majority")
    return r, why


def alike_evidence(init: Finding) -> str | None:
    """A rankless error seen several times in its file: several processes failed alike."""
    if init.rank is not None or init.count < 2:
        return None
    return (f"the same error appears {init.count} times in {init.path.rsplit('/', 1)[-1]} from processes that carry "
            "no rank label (their tracebacks may be interleaved): several processes failed alike; none is first")
