"""Catalog compiled once: the prefilter over chunks, then full patterns on candidate lines."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .catalog import Catalog, Signature
from .patterns import Prefilter

__all__ = ["Matcher", "ANCHORS", "VERSION_RULES"]

# Lines the pipeline needs besides signature lines (traceback structure, launcher reports,
# attempts, versions). Their literals join the prefilter.
ANCHORS = {
    "traceback": "Traceback (most recent call last):",
    "chain-during": "During handling of the above exception",
    "chain-cause": "The above exception was the direct cause",
    "failures": "Failures:",
    "root-cause": "Root Cause (first observed failure):",
    "restart": "will restart worker group",
    "ds-version": "DeepSpeed info: version=",
    "nccl-version": "NCCL version ",
    "rank-mapping": "global_rank_mapping=",
}

VERSION_RULES = [
    ("deepspeed", re.compile(r"DeepSpeed info: version=(\d+(?:\.\d+)+[\w.+-]*)")),
    ("nccl", re.compile(r"NCCL version (\d+\.\d+\.\d+)")),
]

_ROLE_ORDER = {"initiating": 0, "collateral": 1, "context": 2}
_SEV_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass
class _Lit:
    text: str
    ignorecase: bool
    sigs: list[Signature]


class Matcher:
    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        lits: dict[tuple[str, bool], _Lit] = {}
        for sig in catalog:
            for p in sig.patterns:
                key = (p.literal.lower() if p.ignorecase else p.literal, p.ignorecase)
                lit = lits.setdefault(key, _Lit(key[0], p.ignorecase, []))
                if sig not in lit.sigs:
                    lit.sigs.append(sig)
        for a in ANCHORS.values():
            lits.setdefault((a, False), _Lit(a, False, []))
        self._lits = list(lits.values())
        self._cs = [l for l in self._lits if not l.ignorecase and l.sigs]
        self._ci = [l for l in self._lits if l.ignorecase and l.sigs]
        self.prefilter = Prefilter([(l.text, l.ignorecase) for l in self._lits])
        self._refined: dict[str, set[str]] = {}
        for sig in catalog:
            for r in sig.refines:
                self._refined.setdefault(r, set()).add(sig.id)

    @property
    def backend(self) -> str:
        return self.prefilter.backend

    def match(self, text: str) -> Signature | None:
        """The best signature for one prefix-stripped line, or None."""
        cands: list[Signature] = []
        seen: set[str] = set()
        for lit in self._cs:
            if lit.text in text:
                for s in lit.sigs:
                    if s.id not in seen:
                        seen.add(s.id)
                        cands.append(s)
        if self._ci:
            low = text.lower()
            for lit in self._ci:
                if lit.text in low:
                    for s in lit.sigs:
                        if s.id not in seen:
                            seen.add(s.id)
                            cands.append(s)
        if not cands:
            return None
        hits = [s for s in cands if s.matches(text)]
        if not hits:
            return None
        if len(hits) == 1:
            return hits[0]
        ids = {s.id for s in hits}
        # A more specific signature wins over the one it refines (transitively).
        hits = [s for s in hits if not (self._refined.get(s.id, set()) & ids)] or hits
        hits.sort(key=lambda s: (_ROLE_ORDER[s.role], _SEV_ORDER[s.severity], -max(len(p.literal) for p in s.patterns)))
        return hits[0]

    def match_all(self, text: str) -> list[Signature]:
        """Every signature matching the line (for `explain` and tests)."""
        return [s for s in self.catalog if s.patterns and s.matches(text)]
