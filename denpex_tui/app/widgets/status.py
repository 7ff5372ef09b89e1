"""The header: job shape, elapsed time and follow state; then the diagnosis, on as many lines
as it needs (never cut: the confidence and the counts are at its end), and the story beneath it
(restarts, the launcher's other opinion)."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.widget import Widget

__all__ = ["StatusBar", "fmt_elapsed"]

LEVEL = {"initiating": ("▶", "status--initiating"), "error": ("✖", "status--error"),
         "warn": ("▲", "status--warn"), "ok": ("●", "status--ok")}


def fmt_elapsed(s: float, coarse: bool = False) -> str:
    """``coarse`` (the job is quiet): minutes only, so a quiet screen changes once a minute."""
    s = max(0, int(s))
    if coarse:  # whole minutes, never '0m' after 30 s
        return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else (f"{s // 60}m" if s >= 60 else "<1m")
    h, rem = divmod(s, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60:02d}:{rem % 60:02d}"


class StatusBar(Widget):
    COMPONENT_CLASSES = {"status--initiating", "status--error", "status--warn", "status--ok", "status--dim",
                         "status--title"}
    DEFAULT_CSS = """
    StatusBar { height: auto; max-height: 50%; background: $panel; padding: 0 1; }
    StatusBar > .status--title { text-style: bold; color: $primary; }
    StatusBar > .status--initiating { color: $denpex-initiating; text-style: bold; }
    StatusBar > .status--error { color: $denpex-error; text-style: bold; }
    StatusBar > .status--warn { color: $denpex-warning; text-style: bold; }
    StatusBar > .status--ok { color: $denpex-ok; }
    StatusBar > .status--dim { color: $denpex-dim; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._data: tuple = ("", "", True, "ok", "waiting for log lines", "", ())

    def show(self, shape: str, elapsed: str, follow: bool, level: str, diagnosis: str, extra: str = "",
             story: list[str] | tuple = ()) -> None:
        data = (shape, elapsed, follow, level, diagnosis, extra, tuple(story))
        if data != self._data:
            self._data = data
            self._relayout()

    def _rows(self, width: int) -> int:
        """How many rows the header takes at ``width``: any part can grow a row (the gauges'
        alert wraps the first line), and a height that stays behind cuts the diagnosis."""
        if width <= 0:
            return 0
        return len(self.render().wrap(self.app.console, width))

    def _relayout(self) -> None:
        rows = self._rows(self.content_region.width)
        self.refresh(layout=rows != getattr(self, "_shown_rows", None))
        self._shown_rows = rows

    def on_resize(self) -> None:
        self._relayout()

    def render(self) -> Text:
        shape, elapsed, follow, level, diagnosis, extra, story = self._data
        s = lambda c: self.get_component_rich_style(c, partial=True)  # noqa: E731
        t = Text(end="", overflow="fold")
        # the first line is made of parts that wrap whole (never '(5:' / 'gauges)' on two rows)
        parts: list[tuple[str, str, object]] = [("", "denpex", s("status--title")),
                                                ("  ", "● following" if follow else "‖ paused (f/End follows)",
                                                 s("status--ok") if follow else s("status--warn"))]
        parts += [("  " if i == 0 else " · ", p, None) for i, p in enumerate(shape.split(" · ")) if p]
        parts.append(("  ", f"elapsed {elapsed}", s("status--dim")))
        parts += [("  " if i == 0 else " · ", x, s("status--dim")) for i, x in enumerate(extra.split(" · ")) if x]
        width = self.content_region.width or 1 << 16
        col = 0
        for sep, text, style in parts:
            if col and col + cell_len(sep + text) > width:
                t.append("\n")
                col, sep = 0, ""
            t.append(sep)
            t.append(text, style=style)
            col += cell_len(sep + text)
        sym, cls = LEVEL.get(level, LEVEL["ok"])
        t.append("\n")
        t.append(f"{sym} {diagnosis}", style=s(cls))
        for line in story:
            t.append("\n  ")
            t.append(line, style=s("status--dim"))
        return t
