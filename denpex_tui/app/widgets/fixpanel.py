"""The fix panel: cause, the differential with each checklist item measured or not, fix steps,
and the verification commands (placeholders filled and shell-quoted by the core).

A command is copied (OSC 52, ``App.copy_to_clipboard``) with Enter or ``c`` on its row, or a
click; the copied text is ``RenderedCommand.text`` exactly. Denpex never runs a command. An
incomplete command is copied too, and the panel says which ``<placeholders>`` to fill in;
commands from a user's signature pack are marked ``[user pack]``.
"""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static

from denpex_tui.core.commands import RenderedCommand
from denpex_tui.core.fixes import FixPanel as FixData
from denpex_tui.core.frtrace import collective_rows
from denpex_tui.core.model import Finding
from denpex_tui.core.text import safe_str
from denpex_tui.core.words import rank as rank_word

__all__ = ["FixPanel", "CommandRow", "command_note"]

CHECK = {"true": ("✔", "measured: yes"), "false": ("✘", "measured: no"),
         "not measurable here": ("·", "not measurable here"), "manual": ("☐", "check by hand")}
VERDICT = {"likely": "✖ likely", "unlikely": "✔ unlikely", "unknown": "? unknown"}


def command_note(cmd: RenderedCommand) -> str:
    parts = []
    if not cmd.builtin:
        parts.append(f"[user pack: {safe_str(cmd.pack)}]")
    todo = tuple(dict.fromkeys(cmd.missing + cmd.refused))
    if todo:
        parts.append("fill in " + ", ".join(f"<{m}>" for m in todo))
    return "  ".join(parts)


class CommandRow(Static, can_focus=True):
    """One verification command; Enter, ``c`` or a click copies it."""

    BINDINGS = [Binding("enter,c", "copy", "copy command")]
    DEFAULT_CSS = """
    CommandRow { padding: 0 1; margin: 0 0 1 0; background: $panel; }
    CommandRow:focus { background: $denpex-cursor-background; }
    CommandRow:hover { background: $boost; }
    """

    class Copy(Message):
        def __init__(self, command: RenderedCommand) -> None:
            super().__init__()
            self.command = command

    def __init__(self, command: RenderedCommand, index: int, **kw) -> None:
        self.command = command
        t = Text(no_wrap=False)
        t.append(f"[{index}] {safe_str(command.title)}", style="bold")
        note = command_note(command)
        if note:
            t.append("  " + note, style="italic")
        t.append("\n$ ")
        t.append(safe_str(command.text))
        self.command_text = t
        super().__init__(t, **kw)

    def action_copy(self) -> None:
        self.post_message(self.Copy(self.command))

    def on_click(self) -> None:
        self.focus()
        self.post_message(self.Copy(self.command))


class FixPanel(VerticalScroll):
    DEFAULT_CSS = """
    FixPanel { padding: 0 1; }
    FixPanel > .fix-title { text-style: bold; color: $denpex-initiating; }
    FixPanel > .fix-head { text-style: bold; margin-top: 1; }
    FixPanel > .fix-dim { color: $text-muted; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.data: FixData | None = None
        self.finding: Finding | None = None

    def compose(self):
        yield Static(Text("No finding selected yet. The fix panel shows the diagnosis once a rank fails; "
                          "select a finding or explain a traceback (x) to see another."), classes="fix-dim")

    @property
    def commands(self) -> list[CommandRow]:
        return list(self.query(CommandRow))

    def current_command(self) -> RenderedCommand | None:
        rows = self.commands
        focused = self.app.focused
        for r in rows:
            if r is focused:
                return r.command
        return rows[0].command if rows else None

    async def show(self, finding: Finding, data: FixData, differential, origin: str,
                   collectives: dict | None = None) -> None:
        diff_key = None if differential is None else (
            differential.here, differential.measured_path, differential.mount,
            tuple((c.cause, c.verdict, c.evidence) for c in differential.candidates))
        key = (finding.path, finding.line, finding.signature, finding.role, finding.rank, repr(data), diff_key, origin,
               repr(collectives))
        if key == getattr(self, "_key", None):  # the same panel again (a new measurement, same readings)
            self.finding, self.data = finding, data
            return
        self._key = key
        self.finding, self.data = finding, data
        widgets: list[Static] = []

        def para(text: str, classes: str = "") -> None:
            widgets.append(Static(Text(safe_str(" ".join(text.split()))), classes=classes))

        where = rank_word(finding.rank, "no rank in its lines")
        title = Text(f"{'▶ ' if finding.role == 'initiating' else '· '}{where} · {finding.signature} · {finding.role}")
        widgets.append(Static(title, classes="fix-title"))
        widgets.append(Static(Text(safe_str(finding.title))))
        loc = f"{safe_str(finding.path)}:{finding.line}" + (f" (error at line {finding.text_line})" if finding.text_line != finding.line else "")
        widgets.append(Static(Text(loc + ("  [explained selection]" if origin == "explain" else "")), classes="fix-dim"))
        widgets.append(Static(Text("  " + safe_str(finding.text))))
        if finding.origin_frame:
            widgets.append(Static(Text("  raised at " + safe_str(finding.origin_frame)), classes="fix-dim"))
        if collectives:
            pg = safe_str(str(collectives.get("pg") or "?"))
            widgets.append(Static(Text(f"Collectives (Flight Recorder, process group {pg}; "
                                       f"{len(collectives.get('dumps', []))} dumps; the odd ranks first)"),
                                  classes="fix-head"))
            for odd, row in collective_rows(collectives):
                widgets.append(Static(Text(safe_str(row), style="bold" if odd else "", no_wrap=True,
                                           overflow="ellipsis"), classes="fix-title" if odd else ""))
        widgets.append(Static(Text("Cause"), classes="fix-head"))
        para(data.cause)
        if data.affected is True:
            widgets.append(Static(Text("The version in these logs is in the affected range."), classes="fix-title"))
        if differential is not None:
            widgets.append(Static(Text(f"Differential ({safe_str(differential.note)})"), classes="fix-head"))
            if differential.kind == "enospc" and differential.here:  # what was measured (else a caveat says where)
                widgets.append(Static(Text(safe_str(differential.where())), classes="fix-dim"))
            for c in differential.candidates:
                t = Text(f"{VERDICT.get(c.verdict, c.verdict):<11} ", style="bold" if c.verdict == "likely" else "")
                t.append(safe_str(f"{c.title}: {c.evidence}"))  # the evidence names a realpath
                widgets.append(Static(t))

            from denpex_tui.core.text import safe_str as _safe

            for c in getattr(differential, "caveats", ()):  # e.g. the node it was measured on
                widgets.append(Static(Text("  " + _safe(c)), classes="fix-dim"))
        if data.checklist:
            widgets.append(Static(Text("Checklist"), classes="fix-head"))
            for row in data.checklist:
                sym, word = CHECK.get(row.status, ("?", row.status))
                t = Text(f"{sym} {safe_str(row.text)}  ")
                t.append(f"({word})", style="italic")
                widgets.append(Static(t))
        if data.fix:
            widgets.append(Static(Text("Fix"), classes="fix-head"))
            for i, step in enumerate(data.fix, 1):
                para(f"{i}. {step}")
        if data.commands:
            widgets.append(Static(Text("Verify: Enter/c/click copies (OSC 52); Denpex never runs them"), classes="fix-head"))
            if data.values.get("relative"):  # what the paths in the commands are relative to
                para("paths: " + data.values["relative"], classes="fix-dim")
            for i, cmd in enumerate(data.commands, 1):
                widgets.append(CommandRow(cmd, i))
        if data.siblings:
            for sid, ev in data.siblings:
                para(f"not {sid}? {ev}", classes="fix-dim")
        await self.remove_children()
        await self.mount_all(widgets)
        self.scroll_home(animate=False)
