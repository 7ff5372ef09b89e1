"""The header: job shape, elapsed time and follow state; then the diagnosis, on as many lines
as it needs (never cut: the confidence and the counts are at its end), and the story beneath it
(restarts, the launcher's other opinion)."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

__all__ = ["StatusBar", "fmt_elapsed"]

LEVEL = {"initiating": ("▶", "status--initiating"), "error": ("✖", "status--error"),
         "warn": ("▲", "status--warn"), "ok": ("●", "status--ok")}


def fmt_elapsed(s: float, coarse: bool = False) -> str:
    """``coarse`` (the job is quiet): minutes only, so a quiet screen changes once a minute."""
    s = max(0, int(s))
    if coarse:
        return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m"
    h, rem = divmod(s, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60:02d}:{rem % 60:02d}"


class StatusBar(Widget):
    COMPONENT_CLASSES = {"status--initiating", "status--error", "status--warn", "status--ok", "status--dim",
                         "status--title"}
    DEFAULT_CSS = """
    StatusBar { height: auto; max-height: 6; background: $panel; padding: 0 1; }
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
            lines = len(data[6]) != len(self._data[6]) or data[4] != self._data[4]
            self._data = data
            self.refresh(layout=lines)

    def render(self) -> Text:
        shape, elapsed, follow, level, diagnosis, extra, story = self._data
        s = lambda c: self.get_component_rich_style(c, partial=True)  # noqa: E731
        t = Text(end="", overflow="fold")
        t.append("denpex", style=s("status--title"))
        t.append("  ● following" if follow else "  ‖ paused (f/End follows)",
                 style=s("status--ok") if follow else s("status--warn"))
        t.append(f"  {shape}")
        t.append(f"  elapsed {elapsed}", style=s("status--dim"))
        if extra:
            t.append(f"  {extra}", style=s("status--dim"))
        sym, cls = LEVEL.get(level, LEVEL["ok"])
        t.append("\n")
        t.append(f"{sym} {diagnosis}", style=s(cls))
        for line in story:
            t.append("\n  ")
            t.append(line, style=s("status--dim"))
        return t
