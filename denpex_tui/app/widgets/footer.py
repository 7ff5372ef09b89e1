"""The key footer, showing only keys that fit whole.

Textual's footer lays every shown key out in one row and the terminal's edge cuts the last one
mid-word (``/ searc▏``). This one keeps the keys, in binding order, that fit the width whole;
``? help`` (the second binding) lists all of them. The command palette's key is not shown.
"""

from __future__ import annotations

from rich.cells import cell_len
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

__all__ = ["KeyFooter"]


def key_width(key: FooterKey) -> int:
    """Cells a key takes in the non-compact footer: ' k ' then 'description '."""
    return cell_len(key.key_display) + 2 + (cell_len(key.description) + 1 if key.description else 0)


class KeyFooter(Footer):
    def __init__(self, **kw) -> None:
        super().__init__(show_command_palette=False, **kw)
        self._fitted_width = -1

    def compose(self):
        room = self.size.width
        used = 0
        for w in super().compose():
            if isinstance(w, FooterKey):
                used += key_width(w)
                if room and used > room:
                    break  # this key and every later one would be cut: not shown
            yield w
        self._fitted_width = room

    def on_resize(self) -> None:
        if self.size.width != self._fitted_width and self._bindings_ready:
            self.call_after_refresh(self.recompose)
