"""Local ranks to global ones: the one resolver, built from what the logs show per node.

torchrun's ``[defaultM]:`` prefixes and ``attempt_N/M/`` folders name a *local* rank. The
logs give pairs of local and global ranks per node (``[default2]:[rank2]:``, the failure
report's ``rank: 2 (local_rank: 0)``, DeepSpeed's ``global_rank_mapping``); a node whose pairs
show one consistent offset (global = local + k) has it applied to its other local ranks; a
job whose only node needs it and shows no pair maps local = global (*assumed*). What cannot
be mapped stays unmapped: it is said, never guessed.

Scan's job state, the live engine and the view all resolve through one
:class:`RankResolver` made by :meth:`denpex_tui.core.job.JobState.resolver`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["RankResolver", "build_resolver"]


@dataclass(frozen=True)
class RankResolver:
    maps: dict[str, dict[int, int]] = field(default_factory=dict)  # node -> local -> global (seen)
    offsets: dict[str, int] = field(default_factory=dict)  # node -> global - local
    assumed: frozenset[str] = frozenset()  # nodes where local = global is only assumed

    def global_of(self, node_key: str | None, local: int | None) -> int | None:
        if local is None:
            return None
        nk = node_key or ""
        m = self.maps.get(nk)
        if m and local in m:
            return m[local]
        off = self.offsets.get(nk)
        return None if off is None else local + off

    def resolve(self, node_key: str | None, rank: int | None, local: int | None) -> int | None:
        """A line's global rank: its own (or its file's) when it has one, else its local
        rank's on its node, else None."""
        return rank if rank is not None else self.global_of(node_key, local)

    def table(self, keys) -> dict[tuple, int]:
        """(node_key, local) -> global for the keys that map."""
        out = {}
        for nk, local in keys:
            g = self.global_of(nk, local)
            if g is not None:
                out[(nk, local)] = g
        return out


def build_resolver(pairs: dict[str, dict[int, set[int]]], nodes: set[str], needs: set[str]) -> RankResolver:
    """``pairs``: per node, local -> the global ranks seen with it; ``nodes``: every node of the
    job; ``needs``: nodes whose lines name local ranks without a global one."""
    maps: dict[str, dict[int, int]] = {}
    offsets: dict[str, int] = {}
    for nk, d in pairs.items():
        m = {local: next(iter(gs)) for local, gs in d.items() if len(gs) == 1}
        maps[nk] = m
        offs = {g - local for local, g in m.items()}
        if len(offs) == 1:
            offsets[nk] = offs.pop()
    assumed: set[str] = set()
    # Folders whose ranks are all global (rank3.log, DeepSpeed's rank_logs/..._rank1.log) are no
    # other node for local ranks: when one folder alone needs local -> global, it is the job's
    # single launching node, and local = global there.
    cands = nodes if len(nodes) == 1 else needs
    if len(cands) == 1:
        (only,) = cands
        if only not in offsets and not maps.get(only):
            offsets[only] = 0
            assumed.add(only)
    return RankResolver(maps, offsets, frozenset(assumed))
