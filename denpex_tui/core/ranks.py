"""Rank sets as people read them, and one finding standing for a rank's many."""

from __future__ import annotations

import dataclasses

from .model import Finding

__all__ = ["rank_ranges", "rank_entry", "one_per_rank"]


def rank_ranges(ranks) -> str:
    """[0,1,2,5,7,8] -> '0-2,5,7-8'"""
    rs = sorted({r for r in ranks if r is not None})
    if not rs:
        return ""
    out = []
    start = prev = rs[0]
    for r in rs[1:]:
        if r == prev + 1:
            prev = r
            continue
        out.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = r
    out.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(out)


def rank_entry(first: Finding, lst: list[Finding]) -> Finding:
    """A copy of ``first`` that counts every finding of ``lst`` (one row per rank)."""
    entry = dataclasses.replace(first)
    entry.count = sum(f.count for f in lst)
    return entry


def one_per_rank(fs: list[Finding]) -> list[Finding]:
    """The first finding of each rank, in order."""
    seen, out = set(), []
    for f in fs:
        if f.rank not in seen:
            seen.add(f.rank)
            out.append(f)
    return out
