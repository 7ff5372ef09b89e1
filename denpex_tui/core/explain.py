"""``denpex explain`` and the TUI's explain-in-place: one pasted traceback or excerpt.

The excerpt goes through the very pipeline ``scan`` uses (a source of its own), so a
traceback is explained exactly as it would be triaged: the original exception of a chain
decides the signature, and an unknown exception is said to be unknown, with its type and the
frame that raised it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .catalog import Catalog, load_catalog
from .fixes import FixPanel, fix_panel
from .matcher import Matcher, tier_of
from .model import Finding, SourceInfo
from .pipeline import SourceProcessor

__all__ = ["Explanation", "explain_text"]


@dataclass
class Explanation:
    known: bool
    finding: Finding | None
    panel: FixPanel | None
    others: list[Finding] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        f = self.finding
        return {
            "schema": 1,
            "known": self.known,
            "signature": f.signature if f and self.known else None,
            "title": f.title if f else None,
            "role": f.role if f else None,
            "exception": f.exc_type if f else None,
            "origin_frame": f.origin_frame if f else None,
            "rank": f.rank if f else None,
            "line": f.line if f else None,
            "text": f.text if f else None,
            "chained": list(f.chained) if f else [],
            "fields": {k: v for k, v in (f.fields if f else {}).items()},
            "fix_panel": self.panel.to_json() if self.panel and self.known else None,
            "other_findings": [o.to_json() for o in self.others],
        }


_RANK_ORDER = {"initiating": 0, "collateral": 1, "context": 2}


def explain_text(
    data: bytes | str,
    *,
    catalog: Catalog | None = None,
    matcher: Matcher | None = None,
    signature_dirs: list[str] | None = None,
) -> Explanation:
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    if matcher is None:
        catalog = catalog or load_catalog(signature_dirs)
        matcher = Matcher(catalog)
    catalog = matcher.catalog
    # A pasted excerpt may interleave several ranks' lines: read it as a console, whose
    # prefixes ([rankN]:, [defaultN]:, srun/mpirun labels) keep each rank's traceback apart.
    p = SourceProcessor(SourceInfo(path="<excerpt>", kind="console"), matcher)
    if not data.endswith(b"\n"):
        data += b"\n"
    p.feed(data, 0)
    p.close()
    fs = sorted(p.findings.values(), key=lambda f: (f.text_line,))
    if not fs:
        return Explanation(False, None, None)
    # A traceback's finding first; then the most decisive role; then the earliest line.
    fs.sort(key=lambda f: (f.severity != "error", _RANK_ORDER.get(f.role, 3),
                           tier_of(catalog.get(f.signature)) if catalog.get(f.signature) else 2,
                           f.traceback_start is None, f.text_line))
    best = fs[0]
    known = best.signature != "python.uncaught-exception"
    panel = fix_panel(best, catalog) if known else None
    return Explanation(known, best, panel, fs[1:])
