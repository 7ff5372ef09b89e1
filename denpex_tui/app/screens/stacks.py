"""The stacks screen: the job's processes grouped by identical stack, the odd groups first."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from denpex_tui.core.stacks import StackGroup
from denpex_tui.core.text import safe_str

__all__ = ["StacksScreen"]

MAX_FRAMES = 12


class StacksScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,s", "dismiss", "close")]
    DEFAULT_CSS = """
    StacksScreen { align: center middle; }
    StacksScreen > VerticalScroll { width: 95%; max-width: 140; height: 90%; border: round $primary;
                                    background: $surface; padding: 0 1; }
    StacksScreen .stk-head { text-style: bold; margin-top: 1; }
    StacksScreen .stk-odd { text-style: bold; color: $denpex-initiating; margin-top: 1; }
    StacksScreen .stk-dim { color: $text-muted; }
    """

    def __init__(self, groups: list[StackGroup], note: str) -> None:
        super().__init__()
        self.groups = groups
        self.note = note

    def compose(self) -> ComposeResult:
        total = sum(g.count for g in self.groups)
        with VerticalScroll() as box:
            box.border_title = "Stacks (Esc closes)"
            yield Static(Text(safe_str(self.note)), classes="stk-dim")
            for g in self.groups:
                odd = len(self.groups) > 1 and g.count < total / 2
                yield Static(Text(("▶ " if odd else "") + safe_str(g.headline())), classes="stk-odd" if odd else "stk-head")
                for f in g.frames[:MAX_FRAMES]:
                    yield Static(Text("    " + safe_str(f.describe())), classes="stk-dim")
                if len(g.frames) > MAX_FRAMES:
                    yield Static(Text(f"    ... {len(g.frames) - MAX_FRAMES} outer frames"), classes="stk-dim")
                if not g.frames:
                    yield Static(Text(f"    state {safe_str(g.state or '?')}, wchan {safe_str(g.wchan or '?')}"),
                                 classes="stk-dim")
                for e in g.errors[:2]:
                    yield Static(Text("    " + safe_str(e)), classes="stk-dim")
