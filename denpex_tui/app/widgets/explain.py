"""Explain in place: the lines an explanation shows under its traceback in the log view.

The explanation itself comes from ``denpex_tui.core.explain.explain_text`` (the very pipeline
``scan`` uses); this module only lays it out. An unknown traceback gets an honest "no known
signature" with its exception type and origin frame.
"""

from __future__ import annotations

import textwrap

from rich.text import Text

from denpex_tui.core.explain import Explanation

from .fixpanel import command_note

__all__ = ["explanation_lines"]


def _one_line(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def explanation_lines(exp: Explanation, width: int = 100) -> list[Text]:
    width = max(40, min(width, 120))
    out: list[Text] = []

    def add(text: str, style: str = "", indent: str = "  ") -> None:
        for ln in textwrap.wrap(" ".join(text.split()), width - len(indent)) or [""]:
            out.append(Text(indent + ln, style=style))

    f = exp.finding
    if f is None:
        out.append(Text("╭─ explain: no traceback and no known signature in these lines", style="bold"))
        add("Move to a line of a traceback (or select it with the mouse) and press x.")
        out.append(Text("╰─ Esc closes", style="italic"))
        return out
    if not exp.known:
        out.append(Text(f"╭─ explain: no known signature for this uncaught {f.exc_type or 'exception'}", style="bold"))
        add(f.text, "bold")
        if f.origin_frame:
            add("raised at " + f.origin_frame.strip())
        add("Denpex does not guess: search the traceback's first line, or add a signature pack "
            "(docs/signature-format.md).", "italic")
        out.append(Text("╰─ Esc closes", style="italic"))
        return out
    head = Text("╭─ explain: ", style="bold")
    head.append(f"{f.signature}", style="bold")
    head.append(f" · {f.title} · {f.role}")
    out.append(head)
    add(f.text, "bold")
    if f.origin_frame:
        add("raised at " + f.origin_frame.strip())
    for c in f.chained[:3]:
        add("then: " + c, "italic")
    panel = exp.panel
    if panel is not None:
        cause = textwrap.wrap("cause: " + " ".join(panel.cause.split()), width - 2)
        for ln in cause[:3]:
            out.append(Text("  " + ln))
        if len(cause) > 3:
            out[-1].append(" …", style="italic")
        for i, step in enumerate(panel.fix, 1):
            out.append(Text(_one_line(f"  {i}. {' '.join(step.split())}", width)))
        for cmd in panel.commands:
            note = command_note(cmd)
            line = Text(f"  $ {cmd.text}")
            if note:
                line.append(f"   ({note})", style="italic")
            out.append(line)
    out.append(Text("╰─ full cause, fix and copyable commands in the fix panel (c copies) · Esc closes", style="italic"))
    return out
