"""Findings, folded: one row per (attempt, signature, role) with rank ranges.

300 ranks that print the same NCCL timeout are one row ("ranks 0-4,6-299"), not 300. The
initiating finding comes first. Highlighting a row shows its fix panel; Enter also jumps the
log view to it.
"""

from __future__ import annotations

from rich.text import Text
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from ..model import ROLE_SYMBOLS, FindingGroup

__all__ = ["FindingList"]

ROLE_CLASS = {"initiating": "findings--initiating", "collateral": "findings--collateral"}


class FindingList(OptionList):
    COMPONENT_CLASSES = OptionList.COMPONENT_CLASSES | {
        "findings--initiating", "findings--collateral", "findings--warning", "findings--context", "findings--dim",
    }
    DEFAULT_CSS = """
    FindingList { text-wrap: nowrap; text-overflow: ellipsis; }
    FindingList > .findings--initiating { color: $denpex-initiating; text-style: bold; }
    FindingList > .findings--collateral { color: $denpex-collateral; }
    FindingList > .findings--warning { color: $denpex-warning; }
    FindingList > .findings--context { color: $denpex-context; }
    FindingList > .findings--dim { color: $denpex-dim; }
    """

    class Chosen(Message):
        def __init__(self, group: FindingGroup, jump: bool) -> None:
            super().__init__()
            self.group = group
            self.jump = jump

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._groups: list[FindingGroup] = []
        self._sig: list[tuple] = []
        self.initiating_key: tuple | None = None

    def show(self, groups: list[FindingGroup], initiating_key: tuple | None) -> None:
        sig = [(g.key, tuple(sorted(g.ranks)), g.unranked, g.count, g.key == initiating_key) for g in groups]
        if sig == self._sig:
            return
        keep = self._groups[self.highlighted].key if self.highlighted is not None and self._groups else None
        self._groups, self._sig, self.initiating_key = list(groups), sig, initiating_key
        self._attempts = len({g.attempt for g in groups})
        self.clear_options()
        self.add_options([Option(self._prompt(g), id=f"g{i}") for i, g in enumerate(groups)])
        keys = [g.key for g in groups]
        if keep in keys:
            self.highlighted = keys.index(keep)

    def _prompt(self, g: FindingGroup) -> Text:
        first_init = g.key == self.initiating_key
        if g.severity == "warning" and g.role != "initiating":
            cls, sym, label = "findings--warning", "▲", "warn"
        elif first_init:
            cls, sym, label = "findings--initiating", "▶", "FIRST"
        else:
            cls = ROLE_CLASS.get(g.role, "findings--context")
            sym = ROLE_SYMBOLS.get(g.role, "·") if g.role != "initiating" else "✖"
            label = {"collateral": "coll.", "initiating": "error"}.get(g.role, "info")
        style = self.get_component_rich_style(cls, partial=True)
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"{sym} {label:<5} ", style=style)
        if getattr(self, "_attempts", 1) > 1:  # a restarted job: which attempt each row is from
            t.append(f"a{g.attempt} ", style=self.get_component_rich_style("findings--dim", partial=True))
        # a finding without a rank is the launcher's ("agent") only when its signature is the
        # launcher's own; in a rank-less log (one process's plain log) it is that process's
        unranked = "agent" if _launchers(g) else "no rank"
        if g.ranks:
            who = g.rank_text + (f" +{g.unranked} {unranked}" if g.unranked else "")
        else:
            who = unranked
        t.append(who, style=style)
        t.append(f"  {g.signature}")
        if g.count > 1:
            t.append(f" x{g.count}", style=self.get_component_rich_style("findings--dim", partial=True))
        return t

    def group_at(self, index: int | None) -> FindingGroup | None:
        if index is None or not (0 <= index < len(self._groups)):
            return None
        return self._groups[index]

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        event.stop()
        g = self.group_at(event.option_index)
        if g is not None and self.has_focus:
            self.post_message(self.Chosen(g, jump=False))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        g = self.group_at(event.option_index)
        if g is not None:
            self.post_message(self.Chosen(g, jump=True))


# families whose findings are a launcher's own lines (torchrun's agent, srun, mpirun, pdsh, ssh)
LAUNCHER_FAMILIES = frozenset({"torchelastic", "slurm", "mpirun", "pdsh", "ssh", "horovod", "ray"})


def _launchers(g: FindingGroup) -> bool:
    f = g.first
    fam = f.family if f is not None else g.signature.split(".", 1)[0]
    return fam in LAUNCHER_FAMILIES or g.signature.startswith("deepspeed.launcher")
