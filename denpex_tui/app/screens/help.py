"""The help screen: every key (from the bindings themselves, so it cannot drift), the mouse,
and how copying works over SSH and in tmux."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

__all__ = ["HelpScreen", "NOTES", "NAVIGATION"]

NOTES = [
    ("Mouse", "Click a rank to filter the log; click a finding for its fix panel; click a command to copy it. "
              "Select lines of a traceback with the mouse and its explanation opens under it; ctrl+c copies a "
              "selection."),
    ("Copy", "Copying uses OSC 52 (the terminal's clipboard escape sequence): it works over SSH when your local "
             "terminal allows it. In tmux add  set -g set-clipboard on  to ~/.tmux.conf (tmux drops it otherwise). "
             "macOS Terminal does not support OSC 52: use iTerm2, kitty, WezTerm, Alacritty or similar."),
    ("Commands", "Denpex never runs a command. The copied text is exactly what is shown; <name> is a value "
                 "Denpex could not fill in (or refused because it looked unsafe): fill it in yourself. "
                 "[user pack] marks commands from a signature pack that is not built in."),
    ("Views", "Small terminals show one pane at a time: 1 log, 2 ranks, 3 findings, 4 fix, 5 gauges. "
              "Larger ones show them side by side."),
    ("Themes", "t cycles the themes (denpex-dark, denpex-light, denpex-high-contrast); --theme NAME or "
               "[watch] theme = NAME in ~/.config/denpex/config.toml picks one at start. NO_COLOR is honoured."),
]


KEY_NAMES = {
    "question_mark": "?", "right_square_bracket": "]", "left_square_bracket": "[", "slash": "/",
    "escape": "Esc", "enter": "Enter", "f1": "F1", "up": "↑", "down": "↓", "left": "←", "right": "→",
    "pageup": "PgUp", "pagedown": "PgDn", "home": "Home", "end": "End", "ctrl+c": "ctrl+c",
    "tab": "Tab", "shift+tab": "Shift+Tab", "ctrl+r": "ctrl+r", "ctrl+t": "ctrl+t", "ctrl+e": "ctrl+e",
}

# Keys Textual handles itself (focus, selection) and the mouse: listed so that help has them all.
NAVIGATION = [
    Binding("enter", "", "select: a rank filters the log to it, a finding opens its fix panel and jumps to its line, "
                         "a command is copied"),
    Binding("tab", "", "next pane (and, in the fix panel, the next command)"),
    Binding("shift+tab", "", "previous pane / command"),
    Binding("mouse click", "", "a rank filters the log; a finding opens its fix panel; a command is copied; "
                               "a log line moves the cursor there"),
    Binding("mouse wheel", "", "scroll the pane under the pointer (scrolling the log up stops following)"),
    Binding("mouse drag", "", "select log lines: a traceback's explanation opens under it; ctrl+c copies the text"),
]


def _keys(b: Binding) -> str:
    return " / ".join(KEY_NAMES.get(k.strip(), k.strip()) for k in b.key.split(","))


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; max-width: 100; height: 90%; border: round $primary;
                                  background: $surface; padding: 0 1; }
    HelpScreen .help-head { text-style: bold; color: $primary; margin-top: 1; }
    """

    def __init__(self, sections: list[tuple[str, list[Binding]]]) -> None:
        super().__init__()
        self.sections = sections

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text("denpex watch: keys (Esc closes)", style="bold"))
            for title, bindings in self.sections:
                yield Static(Text(title), classes="help-head")
                t = Text()
                seen = set()
                for b in bindings:
                    if not b.description or b.description in seen:
                        continue
                    seen.add(b.description)
                    t.append(f"  {_keys(b):<22}", style="bold")
                    t.append(b.description + "\n")
                t.rstrip()
                yield Static(t)
            for title, body in NOTES:
                yield Static(Text(title), classes="help-head")
                yield Static(Text(body))

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
