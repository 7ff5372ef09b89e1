"""A Rich console whose output has been through core/text.py: the door for human output.

Every renderable printed is rendered first and each text segment escaped with
:func:`~denpex_tui.core.text.safe_str` (line breaks kept), so a file name, a node name, a
warning or a pack text that was not made safe where it was created still cannot drive the
terminal. Rich's own styles and control segments pass as they are. Markup and highlighting are
off: ``[bold]`` in data stays text.
"""

from __future__ import annotations

from typing import IO

from rich.console import Console, ConsoleOptions, RenderableType, RenderHook, RenderResult
from rich.segment import Segment

from denpex_tui.core.text import has_control, safe_str

__all__ = ["safe_console"]


class _Escaped:
    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for seg in console.render(self.renderable, options):
            if seg.control is None and has_control(seg.text.replace("\n", "")):
                yield Segment("\n".join(safe_str(part) for part in seg.text.split("\n")), seg.style)
            else:
                yield seg


class _EscapeHook(RenderHook):
    def process_renderables(self, renderables: list[RenderableType]) -> list[RenderableType]:
        return [_Escaped(r) for r in renderables]


def safe_console(file: IO[str] | None = None, **kw) -> Console:
    """``rich.console.Console`` with markup, highlighting and emoji off and every segment escaped."""
    opts: dict = {"highlight": False, "soft_wrap": True, "emoji": False, "markup": False}
    opts.update(kw)
    con = Console(file=file, **opts)
    con.push_render_hook(_EscapeHook())
    return con
