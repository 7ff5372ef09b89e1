"""Human-readable output of the checklist commands (checkpoints, footprint, verify, evidence).

Every value from a folder name, a config or a log is already safe text (core/text.py) and is
only put into Rich ``Text`` objects, never into markup.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from denpex_tui.core.text import safe_str
from denpex_tui.core.units import human_bytes

__all__ = ["print_checkpoints"]


def _loud(con: Console, msg: str) -> None:
    con.print(Text("!! " + safe_str(msg), style="bold red"))


def print_checkpoints(rep, con: Console) -> None:
    kinds = {"deepspeed": "DeepSpeed", "hf-trainer": "HF Trainer", "megatron": "Megatron-LM",
             "torch-dcp": "torch.distributed.checkpoint", "lightning": "Lightning"}
    head = Text("denpex checkpoints: ", style="bold")
    head.append(f"{safe_str(rep.root)} ({kinds.get(rep.kind, rep.kind or 'no known layout')}, {len(rep.tags)} tags")
    if rep.pointer_file:
        head.append(f", {rep.pointer_file} -> {safe_str(rep.pointer or '?')}")
    head.append(")")
    con.print(head)
    width = max((len(t.tag) for t in rep.tags), default=0)
    for t in rep.tags:
        size = sum(v for v in t.files.values() if v > 0)
        row = Text("  ")
        row.append("✔ complete  " if t.complete else "✖ INCOMPLETE", style="green" if t.complete else "bold red")
        row.append(f"  {safe_str(t.tag):<{width}}  {len(t.files)} files, {human_bytes(size)}")
        if t.tag == rep.pointer:
            row.append(f"  <- {rep.pointer_file}", style="bold")
        con.print(row)
        for m in t.missing:
            con.print(Text("      missing: " + safe_str(m), style="red"))
        for p in t.problems:
            con.print(Text("      problem: " + safe_str(p), style="red"))
    for w in rep.warnings:
        _loud(con, w)
    if rep.resume_from:
        t = Text("resume from: ", style="bold")
        t.append(safe_str(rep.resume_from), style="bold green")
        path = next((x.path for x in rep.tags if x.tag == rep.resume_from), "")
        t.append(f"  ({safe_str(path)})", style="dim")
        con.print(t)
    else:
        _loud(con, "no complete checkpoint to resume from")
