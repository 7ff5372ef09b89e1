"""Explain in place and the fix panel's data, computed in the engine's parse thread.

No parsing here: which lines form a traceback comes from the engine's findings
(``traceback_start`` .. ``extra['tb_end_line']``); the explanation from ``explain_text``; the
panel from ``fix_panel``. These helpers only pick the lines and put the excerpt's finding back
at its place in the real log (so the verification commands name the real file).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from denpex_tui.core.catalog import Catalog
from denpex_tui.core.explain import Explanation, explain_text
from denpex_tui.core.fixes import fix_panel
from denpex_tui.core.job import JobState
from denpex_tui.core.matcher import Matcher
from denpex_tui.core.model import Finding

__all__ = ["block_of", "explain_excerpt", "fix_data", "WINDOW"]

WINDOW = 60  # lines around the cursor when no finding covers it


def block_of(findings: Iterable[Finding], source: str, line: int) -> tuple[int, int, Finding] | None:
    """(first line, last line, finding) of the traceback or report that covers ``line``."""
    best = None
    for f in findings:
        if f.path != source:
            continue
        first = f.traceback_start or f.line
        last = max(f.text_line, int(f.extra.get("tb_end_line") or 0))
        if first <= line <= last and (best is None or first > best[0]):
            best = (first, last, f)
    return best


def explain_excerpt(texts: list[str], first_line: int, source: str, rank: int | None, matcher: Matcher,
                    job: JobState | None) -> Explanation:
    """Explain lines ``first_line..`` of ``source``; the finding points into the real log."""
    exp = explain_text("\n".join(texts), matcher=matcher)
    f = exp.finding
    if f is None:
        return exp
    shift = first_line - 1
    real = dataclasses.replace(
        f, path=source, line=f.line + shift, text_line=f.text_line + shift,
        traceback_start=(f.traceback_start + shift) if f.traceback_start else None,
        rank=f.rank if f.rank is not None else rank,
    )
    panel = fix_panel(real, matcher.catalog, job) if exp.known else None
    return Explanation(exp.known, real, panel, exp.others)


def fix_data(finding: Finding, catalog: Catalog, job: JobState | None, metrics: dict | None,
             process_cwd: tuple[int, str] | None = None):
    return fix_panel(finding, catalog, job, metrics, process_cwd)
