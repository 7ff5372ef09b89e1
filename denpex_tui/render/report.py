"""Human-readable output of ``scan`` and ``explain`` (Rich).

Log text is already safe (no control characters); it is still only ever put into Rich
``Text`` objects, never into markup strings, so ``[bold]`` in a log line stays text.
Colour only on a terminal; ``NO_COLOR`` is honoured by Rich.
"""

from __future__ import annotations

import os
from typing import TextIO

from rich.console import Console
from rich.text import Text

from denpex_tui.core.catalog import Catalog
from denpex_tui.core.fixes import fix_panel
from denpex_tui.core.frtrace import collective_rows
from denpex_tui.core.model import Finding, Incident, iso
from denpex_tui.core.scan import ScanResult
from denpex_tui.core.story import job_story
from denpex_tui.core.text import safe_str
from denpex_tui.core.ranks import rank_ranges
from denpex_tui.core.words import count
from denpex_tui.core.words import rank as rank_word
from denpex_tui.core.words import ranks as ranks_word
from denpex_tui.render.explain_view import fields_line
from denpex_tui.render.safe import safe_console

__all__ = ["make_console", "print_scan", "print_finding_block"]

ROLE_STYLE = {"initiating": "bold red", "collateral": "yellow", "context": "cyan"}
CONF_STYLE = {"high": "bold green", "medium": "yellow", "low": "red"}


def make_console(file: TextIO | None = None) -> Console:
    return safe_console(file)


def _rel(path: str) -> str:
    """A path for display: relative when under the working directory, always safe text
    (a file name can hold escape sequences too)."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        rel = path
    return safe_str(path if rel.startswith("..") else rel)


def _when(f: Finding) -> str:
    if f.time is None:
        return "time unknown"
    s = iso(f.time) or ""
    return s + (" (approx.)" if f.time_approx else "")


def print_finding_block(con: Console, f: Finding, label: str) -> None:
    head = Text("  ")
    head.append(f"{label:<11}", style=ROLE_STYLE.get(f.role, ""))
    head.append(f" {rank_word(f.rank, 'rank not in its lines')}")
    if f.node:
        head.append(f"  node {safe_str(f.node)}")
    head.append(f"  {_when(f)}")
    con.print(head)
    loc = Text(f"      {_rel(f.path)}:{f.line}", style="dim")
    if f.text_line != f.line:
        loc.append(f" (error at line {f.text_line})", style="dim")
    con.print(loc)
    con.print(Text("      " + f.text, style="bold"))
    facts = fields_line(f.fields)
    if facts:
        con.print(Text("      " + facts, style="cyan"))
    if f.origin_frame:
        con.print(Text("      raised at " + f.origin_frame, style="dim"))


def _fold(findings: list[Finding]) -> list[tuple[str, str, str, int, list[int | None]]]:
    """Fold identical findings on many ranks into one row with rank ranges."""
    groups: dict[tuple[str, str, int], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.signature, f.role, f.attempt), []).append(f)
    rows = []
    for (sig, role, attempt), fs in groups.items():
        rows.append((sig, role, fs[0].title, sum(f.count for f in fs), [f.rank for f in fs]))
    order = {"initiating": 0, "collateral": 1, "context": 2}
    rows.sort(key=lambda r: (order.get(r[1], 3), r[0]))
    return rows


def _print_measured(con: Console, f: Finding, result: ScanResult) -> None:
    """The ENOSPC/EMFILE differential, measured on this machine now (never at failure time)."""
    from denpex_tui.core.fixes import incident_values
    from denpex_tui.probes.differential import differential, differential_kind
    from denpex_tui.probes.sampler import Prober

    if differential_kind(f.signature) is None:
        return
    values = incident_values(f, result.job)
    path = values.get("path") or values.get("dir")
    if values.get("job_dir_known") is False:  # relative, and the job's directory unknown: not ours to guess
        con.print(Text("  measured now: not measured: " + safe_str(values["relative"]), style="dim"))
        return
    try:
        prober = Prober(paths=[values["dir"]] if values.get("dir") else [])
        sig = result.catalog.get(f.signature)
        checklist = [{"text": c.text, "condition": c.condition} for c in sig.checklist] if sig else []
        d = differential(f.signature, path, prober.snapshot(), checklist=checklist)
    except Exception as exc:  # a probe must never break the report
        con.print(Text(f"  measured now: not available ({type(exc).__name__})", style="dim"))
        return
    t = Text("  measured now on this machine ", style="bold")
    t.append(f"({d.note}, {d.measured_at}):", style="dim")
    con.print(t)
    for c in d.candidates:
        mark = {"likely": "!", "unlikely": "-", "unknown": "?"}.get(c.verdict, "?")
        style = {"likely": "bold red", "unlikely": "dim", "unknown": "yellow"}.get(c.verdict, "")
        row = Text(f"    {mark} {c.verdict:<9} ", style=style)
        row.append(f"{c.title}: {safe_str(c.evidence)}")
        con.print(row)
    for cv in d.caveats:
        con.print(Text("    note: " + safe_str(cv), style="dim"))


def print_collectives(con: Console, table: dict, max_rows: int = 12) -> None:
    """The collective table from the Flight Recorder dumps: ranks by last sequence id and state,
    the odd ranks first (``table`` is ``Incident.collectives``)."""
    pg = table.get("pg") or "?"
    desc = f" ({table['pg_desc']})" if table.get("pg_desc") else ""
    con.print(Text(f"  collectives (Flight Recorder, process group {safe_str(pg)}{safe_str(desc)}; "
                   f"{len(table.get('dumps', []))} dumps):", style="bold"))
    for odd, row in collective_rows(table, max_rows):
        con.print(Text("    " + safe_str(row), style="bold red" if odd else ""))


_SAME_CAUSE_SHOWN = 3


def print_incident(con: Console, inc: Incident, result: ScanResult, catalog: Catalog, measure: bool = True) -> None:
    head = Text(f"Attempt {inc.attempt}: ", style="bold")
    head.append(inc.summary, style="bold")
    head.append("   confidence: ")
    head.append(inc.confidence, style=CONF_STYLE.get(inc.confidence, ""))
    con.print(head)
    if inc.initiating:
        print_finding_block(con, inc.initiating, "initiating")
    for s in inc.same_cause[:_SAME_CAUSE_SHOWN]:
        print_finding_block(con, s, "same cause")
    rest = inc.same_cause[_SAME_CAUSE_SHOWN:]
    if rest:  # 10 000 ranks failing alike are a few lines, not 10 000 blocks
        by_sig: dict[str, list[Finding]] = {}
        for c in rest:
            by_sig.setdefault(c.signature, []).append(c)
        for sig, fs in by_sig.items():
            t = Text("  ")
            t.append(f"{'same cause':<11}", style=ROLE_STYLE.get("initiating", ""))
            t.append(f" ranks {rank_ranges([f.rank for f in fs]) or '?'}  {sig}  ({fs[0].title}; "
                     f"{len(fs)} more, folded)")
            con.print(t)
    if inc.collateral:
        by_sig: dict[str, list[Finding]] = {}
        for c in inc.collateral:
            by_sig.setdefault(c.signature, []).append(c)
        for sig, fs in by_sig.items():
            t = Text("  ")
            t.append(f"{'collateral':<11}", style=ROLE_STYLE["collateral"])
            t.append(f" {ranks_word([f.rank for f in fs], 'rank not in their lines')}  {sig}  ({fs[0].title})")
            con.print(t)
    if inc.first_warning:
        w = inc.first_warning
        t = Text("  first warning ", style="yellow")
        t.append(f"{rank_word(w.get('rank'), 'rank not in its lines')} {w.get('time') or ''} {_rel(w['path'])}:{w.get('line') or '?'}")
        con.print(t)
        con.print(Text("      " + w["text"]))
    if inc.collectives:
        print_collectives(con, inc.collectives)
    if inc.evidence:
        con.print(Text("  evidence:", style="bold"))
        for e in inc.evidence:
            con.print(Text("    - " + e))
    if inc.hypotheses:
        con.print(Text("  competing hypotheses (ranked lower, until a control separates them):", style="bold"))
        for h in inc.hypotheses:
            t = Text(f"    - {rank_word(h.get('rank'), 'rank not in its lines')} {h['signature']}: ", style="")
            t.append(h["rule"], style="dim")
            con.print(t)
    if inc.initiating and measure:
        _print_measured(con, inc.initiating, result)
    if inc.initiating:
        panel = fix_panel(inc.initiating, catalog, result.job)
        if panel.signature is not None:
            con.print(Text("  cause:", style="bold"))
            con.print(Text("    " + " ".join(panel.cause.split())))
            if panel.affected is True:
                con.print(Text("    the DeepSpeed/NCCL version in these logs is in the affected range", style="red"))
            if panel.fix:
                con.print(Text("  fix:", style="bold"))
                for i, step in enumerate(panel.fix, 1):
                    con.print(Text(f"    {i}. {step}"))
            if panel.values.get("relative"):  # what the paths below are relative to
                con.print(Text("  paths: " + safe_str(panel.values["relative"]), style="yellow"))
            linked = [r for r in panel.checklist if r.command is not None]
            if linked:
                con.print(Text("  checklist, with the denpex command that answers each item:", style="bold"))
                for r in linked:
                    head = Text("    - " + r.text)
                    if not r.command.complete:  # on the item's line: the $ line is only the command
                        head.append("  (fill in " + ", ".join(f"<{m}>" for m in r.command.missing + r.command.refused)
                                    + ")", style="yellow")
                    con.print(head)
                    con.print(Text("      $ " + r.command.text, style="green"))
            if panel.commands:
                con.print(Text("  verify (run these yourself; Denpex never runs them):", style="bold"))
                for c in panel.commands:
                    t = Text("    # " + c.title, style="dim")
                    if not c.builtin:
                        t.append(f"  [user pack: {c.pack}]", style="magenta")
                    if not c.complete:
                        t.append("  (fill in " + ", ".join(f"<{m}>" for m in c.missing + c.refused) + ")", style="yellow")
                    con.print(t)
                    con.print(Text("    $ " + c.text, style="green"))
    con.print()


def print_scan(result: ScanResult, con: Console, *, verbose: bool = False, measure: bool = True) -> None:
    srcs = result.job.sources()
    ranks = result.job.ranks()
    nodes = sorted({s.node for s in srcs if s.node})
    lines = sum(s.lines for s in srcs)
    head = Text("denpex scan: ", style="bold")
    head.append(
        f"{count(len(srcs), 'source')}, {count(len(ranks), 'rank')}"
        + (f" ({rank_ranges(ranks)})" if ranks else "")
        + (f", {count(len(nodes), 'node')}" if len(nodes) > 1 else "")
        + f", {count(lines, 'line')} in {result.elapsed_s:.2f} s"
    )
    dumps, ras = len(getattr(result.job, "dumps", {})), len(getattr(result.job, "ras", {}))
    if dumps or ras:
        head.append(", with " + " and ".join(
            x for x in (f"{dumps} Flight Recorder dump{'s' if dumps != 1 else ''}" if dumps else "",
                        f"{ras} NCCL RAS report{'s' if ras != 1 else ''}" if ras else "") if x))
    con.print(head)
    versions = result.job.versions()
    if versions:
        con.print(Text("versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())), style="dim"))
    con.print()
    unknown = result.job.unknown_lines() if not result.incidents else []
    if not result.incidents and not unknown:
        con.print(Text("No failure found: no rank logged a known failure signature or an uncaught exception.", style="green"))
    elif not result.incidents:
        con.print(Text("No known failure signature, but these lines look like errors (first 5 per rank); "
                       "no signature knows them:", style="yellow"))
        for u in unknown:
            who = rank_word(u["rank"], "no rank")
            con.print(Text(f"  {who:<8} {_rel(u['path'])}:{u['line']}  ", style="dim").append(u["text"][:300], style=""))
    job = result.job  # a JobState, or an evidence bundle's job read back (fewer views)
    story = job_story(result.incidents, getattr(job, "failure_entries", list)(),
                      len(getattr(job, "ranks_by_attempt", dict)()) or None)
    if story is not None:  # the same story watch tells in its header
        t = Text("Root cause: ", style="bold")
        t.append(story.headline, style="bold")
        con.print(t)
        for line in (story.beneath, story.launcher_note):
            if line:
                con.print(Text("  " + line))
        con.print()
    for inc in result.incidents:
        print_incident(con, inc, result, result.catalog, measure=measure)
    shown = [f for f in result.findings if verbose or f.severity == "error"]
    rows = _fold(shown)
    if rows:  # the count is of the rows below; what they fold is said apart
        folded = len(shown) - len(rows)
        con.print(Text(f"Findings ({count(len(rows), 'row')}" + (f", folding {count(len(shown), 'finding')}"
                                                                    if folded else "") + "):", style="bold"))
        for sig, role, title, n, ranks_ in rows:
            t = Text("  ")
            t.append(f"{role:<11}", style=ROLE_STYLE.get(role, ""))
            launcher = sig.startswith(("torchelastic.", "deepspeed.launcher", "slurm.", "pdsh.", "mpirun."))
            who = ranks_word(ranks_, "agent" if launcher and all(r is None for r in ranks_) else "no rank")
            t.append(f" {sig:<34} {who:<16} x{n:<5} {title}")
            con.print(t)
    for w in result.warnings:
        con.print(Text("warning: " + safe_str(w), style="yellow"))
