"""All detectors compiled once: one prefilter pass over chunks, then the detectors on candidate lines.

The catalog (TOML patterns, which may declare named groups) is one detector; the generic ones of
:mod:`denpex_tui.core.detect` (errno texts, fatal reports, exception lines) sit beside it, and
their literals join the same prefilter. :meth:`Matcher.detect` gives one :class:`Detection`
per line, by one rule: an error beats a context line; then a specific catalog signature
(tier 0) beats an errno or fatal-signal one (tier 1), which beats a bare exception (tier 2).
Fields of every detector that fired are merged (the winner's first). A detector runs only on a
line that holds one of its literals (one RE2 set pass over the line says which): the literals
every signature's pattern requires, and each generic detector's own, which must cover its
regular expressions (a test holds the gated matcher equal to one that tries everything).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from typing import Any

from .catalog import Catalog, Signature
from .detect import ErrnoDetector, ExceptionDetector, FatalDetector
from .firsterror import ERROR_LINE_WORDS
from .patterns import LiteralSet, Prefilter
from .progress import SAVE_NEEDLES

__all__ = ["Matcher", "Detection", "ANCHORS", "VERSION_RULES", "ERROR_WORDS", "tier_of"]

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

# Words that make a line an error worth showing even when no detector knows it.
ERROR_WORDS = ("error", "failed", "failure", "fatal", "exception", "abort", "killed", "segmentation fault")
_GENERIC_IDS = {"python.uncaught-exception"}

# The history pass's other searches over every chunk: each rank's first error line, and the lines
# that may be checkpoint saves (scan's rhythm). They join the prefilter's pass (its Hyperscan
# database, or its RE2 union), so one pass serves the three (SourceProcessor.chunk_groups).
CHUNK_GROUPS = {"errors": (ERROR_LINE_WORDS, True), "saves": (SAVE_NEEDLES, False)}

_ROLE_ORDER = {"initiating": 0, "collateral": 1, "context": 2}


def tier_of(sig: Signature) -> int:
    """0: a specific signature; 1: an errno/OS or fatal-signal one; 2: a bare exception."""
    if sig.id in _GENERIC_IDS:
        return 2
    if sig.family in ("os", "proc"):
        return 1
    return 0


@dataclass(slots=True)
class Detection:
    sig: Signature
    fields: dict[str, Any]
    tier: int
_SEV_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass
class _Lit:
    text: str
    ignorecase: bool
    sigs: list[Signature]
    detectors: list[int]  # indices into Matcher._generic whose literal this is


_CACHE_LINES = 512


class Matcher:
    def __init__(self, catalog: Catalog, *, error_words: bool = True, small: bool = False):
        """``error_words``: also find lines with error words no detector knows (for the report
        of unrecognised error lines). ``scan`` leaves them out of its first, fast pass and reads
        them only when that pass found no incident. ``small``: few bytes will be scanned (the
        prefilter's backend: :class:`~denpex_tui.core.patterns.Prefilter`)."""
        self.catalog = catalog
        lits: dict[tuple[str, bool], _Lit] = {}
        for sig in catalog:
            for p in sig.patterns:
                key = (p.literal.lower() if p.ignorecase else p.literal, p.ignorecase)
                lit = lits.setdefault(key, _Lit(key[0], p.ignorecase, [], []))
                if sig not in lit.sigs:
                    lit.sigs.append(sig)
        for a in ANCHORS.values():
            lits.setdefault((a, False), _Lit(a, False, [], []))
        self._generic = [ErrnoDetector(), FatalDetector(), ExceptionDetector()]
        for i, det in enumerate(self._generic):
            for text, ci in det.literals:
                key = (text.lower() if ci else text, ci)
                lit = lits.setdefault(key, _Lit(key[0], ci, [], []))
                if i not in lit.detectors:
                    lit.detectors.append(i)
        self.error_words = error_words
        self._cache: dict[str, Detection | None] = {}
        if error_words:
            for w in ERROR_WORDS:
                lits.setdefault((w, True), _Lit(w, True, [], []))
        self._lits = list(lits.values())
        # Which literals a line holds, in one call: the detectors below run only where one of
        # their literals is (a catalog signature's regex, each generic detector), instead of
        # every detector on every candidate line.
        self._useful = [l for l in self._lits if l.sigs or l.detectors]
        self._which = LiteralSet([(l.text, l.ignorecase) for l in self._useful])
        self._small = small
        self._prefilter: Prefilter | None = None
        self._refined: dict[str, set[str]] = {}
        for sig in catalog:
            for r in sig.refines:
                self._refined.setdefault(r, set()).add(sig.id)

    @property
    def prefilter(self) -> Prefilter:
        """The chunk prefilter, compiled at first use: a matcher that only judges lines one by
        one (the first-warning search, an excerpt) never compiles it."""
        if self._prefilter is None:
            self._prefilter = Prefilter([(l.text, l.ignorecase) for l in self._lits], small=self._small,
                                        groups=CHUNK_GROUPS)
        return self._prefilter

    @property
    def backend(self) -> str:
        return self.prefilter.backend

    def detect(self, text: str) -> Detection | None:
        """The one detection of a prefix-stripped line (see the module's rule), or None. A line
        repeated verbatim (20 000 identical NCCL WARN lines) is detected once: a small cache by
        text (the detection is a pure function of it; callers get their own copy of the fields)."""
        cache = self._cache
        if text in cache:
            d = cache[text]
            return None if d is None else Detection(d.sig, dict(d.fields), d.tier)
        d = self._detect(text)
        if len(cache) >= _CACHE_LINES:
            cache.pop(next(iter(cache)))
        cache[text] = d
        return None if d is None else Detection(d.sig, dict(d.fields), d.tier)

    def _detect(self, text: str) -> Detection | None:
        hits: list[Detection] = []
        found = self._found(text)
        if not found:
            return None
        best = self._best(text, found)
        if best is not None:
            hits.append(Detection(best[0], best[1], tier_of(best[0])))
        ran: set[int] = set()
        for lit in found:
            ran.update(lit.detectors)
        for i, det in enumerate(self._generic):
            if i not in ran:
                continue
            r = det.detect(text)
            if r is None:
                continue
            gsig = self.catalog.get(r[0])
            if gsig is not None:
                hits.append(Detection(gsig, r[1], tier_of(gsig)))
        if not hits:
            return None
        if len(hits) == 1:
            return hits[0]
        hits.sort(key=lambda d: (d.sig.severity == "info", d.tier))
        best = hits[0]
        for h in hits[1:]:
            for k, v in h.fields.items():
                best.fields.setdefault(k, v)
        return best

    def match(self, text: str) -> Signature | None:
        """The best catalog signature for one prefix-stripped line, or None."""
        best = self._best(text, self._found(text))
        return best[0] if best is not None else None

    def _found(self, text: str) -> list[_Lit]:
        """The literals of signatures and detectors that ``text`` holds: case-sensitive ones
        first, each group in catalog order (the order ties between signatures keep)."""
        found = [self._useful[i] for i in self._which.ids(text)]
        if len(found) > 1:
            found.sort(key=lambda l: l.ignorecase)  # stable: catalog order within each group
        return found

    def _best(self, text: str, found: list[_Lit]) -> tuple[Signature, dict[str, Any]] | None:
        """The best signature among those of ``found`` that match, with its fields."""
        cands: list[Signature] = []
        seen: set[str] = set()
        for lit in found:
            for s in lit.sigs:
                if s.id not in seen:
                    seen.add(s.id)
                    cands.append(s)
        if not cands:
            return None
        fields: dict[str, dict[str, Any]] = {}
        hits = []
        for s in cands:
            f = s.search(text)
            if f is not None:
                fields[s.id] = f
                hits.append(s)
        if not hits:
            return None
        if len(hits) > 1:
            ids = {s.id for s in hits}
            # A more specific signature wins over the one it refines (transitively).
            hits = [s for s in hits if not (self._refined.get(s.id, set()) & ids)] or hits
            hits.sort(key=lambda s: (_ROLE_ORDER[s.role], _SEV_ORDER[s.severity], -max(len(p.literal) for p in s.patterns)))
        return hits[0], fields[hits[0].id]
