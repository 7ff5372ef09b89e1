"""Rich rendering of ``denpex explain`` and ``denpex signatures ID``."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from denpex_tui.core.catalog import Signature
from denpex_tui.core.explain import Explanation

__all__ = ["print_explanation", "print_signature", "fields_line"]

_FIELD_ORDER = ("errname", "errno", "path", "signal", "exitcode", "exc_type", "assertion", "peer", "device", "named_by")


def fields_line(fields: dict) -> str:
    """The facts a detector read from the line: 'errno ENOSPC (28) | path /ckpt/x | ...'."""
    parts = []
    if fields.get("errname"):
        parts.append(f"errno {fields['errname']} ({fields.get('errno')})")
    for k in _FIELD_ORDER[2:]:
        v = fields.get(k)
        if v is not None and v != "":
            parts.append(f"{k.replace('_', ' ')} {v}")
    return " | ".join(parts)


def print_explanation(exp: Explanation, con: Console) -> None:
    f = exp.finding
    if f is None:
        con.print(Text("No known signature and no traceback in this excerpt.", style="yellow"))
        return
    if not exp.known:
        t = Text("No known signature", style="bold yellow")
        t.append(f" for this uncaught {f.exc_type or 'exception'}.")
        con.print(t)
        con.print(Text("  " + f.text, style="bold"))
        if f.origin_frame:
            con.print(Text("  raised at " + f.origin_frame, style="dim"))
        con.print(Text("  Denpex does not guess: search the first line of the traceback, or add a signature "
                       "pack (docs/signature-format.md).", style="dim"))
        return
    t = Text(f.signature, style="bold")
    t.append(f"  {f.title}  ")
    t.append(f"[{f.role}]", style={"initiating": "red", "collateral": "yellow"}.get(f.role, "cyan"))
    con.print(t)
    con.print(Text("  " + f.text, style="bold"))
    facts = fields_line(f.fields)
    if facts:
        con.print(Text("  " + facts, style="cyan"))
    if f.origin_frame:
        con.print(Text("  raised at " + f.origin_frame, style="dim"))
    for c in f.chained:
        con.print(Text("  then: " + c, style="dim"))
    if exp.panel:
        con.print(Text("cause:", style="bold"))
        con.print(Text("  " + " ".join(exp.panel.cause.split())))
        if exp.panel.fix:
            con.print(Text("fix:", style="bold"))
            for i, s in enumerate(exp.panel.fix, 1):
                con.print(Text(f"  {i}. {s}"))
        for sid, ev in exp.panel.siblings:
            con.print(Text(f"  not {sid}? {ev}", style="dim"))
        if exp.panel.commands:
            con.print(Text("verify (run these yourself):", style="bold"))
            for c in exp.panel.commands:
                t = Text("  # " + c.title, style="dim")
                if not c.builtin:
                    t.append(f"  [user pack: {c.pack}]", style="magenta")
                con.print(t)
                con.print(Text("  $ " + c.text, style="green"))
    for o in exp.others:
        if o.severity == "error":
            con.print(Text(f"also: {o.signature} at line {o.text_line}: {o.text[:120]}", style="dim"))


def print_signature(sig: Signature, con: Console) -> None:
    t = Text(sig.id, style="bold")
    t.append(f"  {sig.title}")
    if not sig.builtin:
        t.append(f"  [user pack: {sig.pack}]", style="magenta")
    con.print(t)
    con.print(Text(f"family {sig.family} | phase {sig.phase} | role {sig.role} | severity {sig.severity}", style="dim"))
    if sig.affects_package:
        con.print(Text(f"affects {sig.affects_package} {sig.affects_versions}", style="dim"))
    for p in sig.patterns:
        con.print(Text("pattern: " + p.source, style="cyan"))
    con.print(Text("cause:", style="bold"))
    con.print(Text("  " + " ".join(sig.cause.split())))
    for label, items in (("symptoms", sig.symptoms), ("fix", sig.fix)):
        con.print(Text(label + ":", style="bold"))
        for i, s in enumerate(items, 1):
            con.print(Text(f"  {i}. {s}"))
    if sig.checklist:
        con.print(Text("checklist:", style="bold"))
        for c in sig.checklist:
            con.print(Text(f"  [ ] {c.text}" + (f"   ({c.condition})" if c.condition else "")))
    if sig.verify:
        con.print(Text("verify:", style="bold"))
        for v in sig.verify:
            con.print(Text(f"  # {v.title}", style="dim"))
            con.print(Text(f"  $ {v.command}", style="green"))
    for s in sig.siblings:
        con.print(Text(f"sibling {s.id}: {s.evidence}", style="dim"))
    con.print(Text("references: " + "; ".join(sig.references), style="dim"))
