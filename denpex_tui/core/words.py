"""Numbers and plurals as people read them, in one place.

Every headline, summary and count that Denpex prints says "1 rank" / "2 ranks", "rank 3" /
"ranks 0-2,5", "was" / "were" through these functions, so that no template says "1 ranks",
"ranks 0 were" or "rank ?". ``tests/test_words.py`` renders every template with one and with
many.
"""

from __future__ import annotations

from collections.abc import Iterable

from .ranks import rank_ranges

__all__ = ["plural", "count", "rank", "ranks", "be", "UNRANKED", "span", "tally"]

# A finding whose lines carry no rank and whose file name gives none (a single process's log,
# a pasted excerpt): said as what it is, never as "rank ?".
UNRANKED = "the process (no rank in its lines)"

_IRREGULAR = {"process": "processes", "is": "are", "was": "were", "has": "have", "its": "their", "it": "they"}


def plural(n: int, one: str, many: str | None = None) -> str:
    """The word for ``n`` of them: plural(1, 'rank') -> 'rank', plural(0, 'rank') -> 'ranks'."""
    if n == 1:
        return one
    return many or _IRREGULAR.get(one) or (one + "es" if one.endswith(("s", "sh", "ch", "x")) else one + "s")


def count(n: int, one: str, many: str | None = None) -> str:
    """'1 rank', '2 ranks', '1,069 lines'."""
    return f"{n:,} {plural(n, one, many)}"


def be(n: int, past: bool = False) -> str:
    """The verb for ``n`` subjects: 'is'/'are', or 'was'/'were'."""
    return plural(n, "was" if past else "is")


def rank(r: int | None, unranked: str = UNRANKED) -> str:
    """'rank 3', or what a finding without a rank is."""
    return f"rank {r}" if r is not None else unranked


def ranks(rs: Iterable[int | None], none: str = "no rank") -> str:
    """'rank 3', 'ranks 0-2,5' (ranges), or ``none`` when there is no rank."""
    got = sorted({r for r in rs if r is not None})
    if not got:
        return none
    return f"rank {got[0]}" if len(got) == 1 else "ranks " + rank_ranges(got)


def span(rs: Iterable[int | None], limit: int = 24) -> str:
    """The ranges of a rank set, or, when they would not fit in ``limit`` characters (1,325 of
    2,000 ranks seen so far), its bounds: '0-3', '2-3,5-6', 'within 0-1999'. Never a line of
    ranges a header has to wrap."""
    got = sorted({r for r in rs if r is not None})
    if not got:
        return ""
    text = rank_ranges(got)
    if len(text) <= limit:
        return text
    return f"within {got[0]}-{got[-1]}"


def tally(collateral: int, same_cause: int = 0) -> str:
    """The count at a summary's end: '3 collateral', '1 same cause', '2 collateral, 1 same cause',
    'no collateral'."""
    parts = [f"{collateral:,} collateral"] if collateral else []
    if same_cause:
        parts.append(f"{same_cause:,} same cause")
    return ", ".join(parts) or "no collateral"
