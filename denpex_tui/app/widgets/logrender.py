"""How one log line looks: SGR colours kept from the log, the signature span highlighted by
role and severity, the traceback bar in the gutter, search matches, the rank label.

Everything is a ``rich.text.Text`` built from the (already safe) line: never markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from rich.style import Style
from rich.text import Text


__all__ = ["Mark", "decorate", "sgr_style", "role_class"]

ROLE_CLASS = {"initiating": "logview--initiating", "collateral": "logview--collateral", "context": "logview--context"}
ROLE_MARK = {"initiating": "▶", "collateral": "◆", "context": "·"}


@dataclass(frozen=True)
class Mark:
    role: str
    severity: str
    text: str  # the part of the line that carries the signature
    signature: str


@lru_cache(maxsize=256)
def sgr_style(sgr: str) -> Style:
    """The Rich style of an SGR parameter string (digits and ';' only: checked at the door)."""
    t = Text.from_ansi(f"\x1b[{sgr}mX")
    return t.spans[0].style if t.spans else Style.null()  # type: ignore[return-value]


def role_class(role: str, severity: str) -> str:
    if severity == "warning" and role != "initiating":
        return "logview--warning"
    return ROLE_CLASS.get(role, "logview--context")


def decorate(ll, rank: int | None, gw: int, marks: dict, blocks: dict, search,
             style: Callable[[str], Style]) -> tuple[Text, Text]:
    """(body, gutter) of one log line: SGR colours, the signature span, the traceback bar,
    search matches (``search``: a compiled pattern or None), and the rank in the gutter."""
    text = Text(ll.text, no_wrap=True, end="")
    for s, e, sgr in ll.spans:
        text.stylize(sgr_style(sgr), s, e)
    if "\t" in ll.text:
        text.expand_tabs(8)
    marker = " "
    mstyle = style("logview--gutter")
    mark = marks.get((ll.source, ll.line))
    if mark is not None and mark.text:
        cls = role_class(mark.role, mark.severity)
        i = text.plain.find(mark.text)
        if i >= 0:
            text.stylize(style(cls), i, i + len(mark.text))
        marker, mstyle = ROLE_MARK.get(mark.role, "·"), style(cls)
    else:
        for first, last, role, severity, block_rank in blocks.get(ll.source, ()):
            if first <= ll.line <= last and (block_rank is None or rank in (block_rank, None)):
                marker = "┌" if ll.line == first else ("└" if ll.line == last else "│")
                mstyle = style(role_class(role, severity))
                break
    if search is not None:  # every match on the line (an RE2 pattern over the shown text)
        for m in search.finditer(text.plain):
            if m.end() > m.start():
                text.stylize(style("logview--match"), m.start(), m.end())
    if getattr(ll, "cut", False):
        text.append(" …", style=style("logview--gutter"))
    gutter = Text(f"{'·' if rank is None else rank:>{gw - 2}}", style=style("logview--gutter"))
    gutter.append(marker, style=mstyle)
    gutter.append(" ")
    return text, gutter
