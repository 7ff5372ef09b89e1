"""Human-readable output of the checklist commands (checkpoints, footprint, verify, evidence).

Every value from a folder name, a config or a log is already safe text (core/text.py) and is
only put into Rich ``Text`` objects, never into markup.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from denpex_tui.core.text import safe_str
from denpex_tui.core.units import human_bytes
from denpex_tui.core.words import count, plural
from denpex_tui.core.words import rank as rank_word
from denpex_tui.core.words import ranks as ranks_word

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
    elif not any("no complete tag" in w for w in rep.warnings):
        _loud(con, "no complete checkpoint to resume from")


def _b(n) -> str:
    return "?" if n is None else f"{human_bytes(n)} ({n:,} B)"


def print_footprint(fp, con: Console) -> None:
    i = fp.inputs
    head = Text("denpex footprint: ", style="bold")
    head.append(f"{i['params']:,} parameters, {i['world_size']} ranks"
                + (f" on {i['nodes']} nodes ({i['ranks_per_node']} per node)" if i["nodes"] else "")
                + f", ZeRO stage {i['zero_stage']}, {safe_str(str(i['optimizer']))} ({i['states_per_param']} states)")
    con.print(head)
    rows = [("optimizer state (fp32 master + states)", "optimizer_state_bytes"), ("fp32 gradients", "gradient_bytes"),
            ("parameters", "param_bytes"), ("NVMe total", "nvme_bytes")]
    con.print(Text(f"  {'':<44} {'per rank':>28} {'per node':>28}", style="dim"))
    for label, k in rows:
        pn = fp.per_node[k] if fp.per_node else None
        con.print(Text(f"  {label:<44} {_b(fp.per_rank[k]):>28} {(_b(pn) if fp.per_node else '-'):>28}",
                       style="bold" if k == "nvme_bytes" else ""))
    ck = fp.checkpoint_copy
    con.print(Text(f"  {'checkpoint copy per tag (offloaded_tensors)':<44} {_b(ck['per_rank']):>28} "
                   f"{(_b(ck['per_node']) if ck['per_node'] is not None else '-'):>28}   job {_b(ck['job'])}"))
    ph = fp.pinned_host_per_rank
    con.print(Text(f"  pinned host memory per rank (not NVMe): param buffers {_b(ph['param_buffers'])}, "
                   f"optimizer buffers {_b(ph['optimizer_buffers'])}", style="dim"))
    for e in fp.nvme_paths:
        t = Text(f"  nvme_path {safe_str(e['path'])} ({', '.join(e['roles'])}): must hold ")
        t.append(_b(e.get("compared_bytes", e["per_node_bytes"] or e["per_rank_bytes"])))
        m = e.get("measured")
        if m:
            t.append(f"; measured now on this node: {_b(m.get('bytes_free'))} free, "
                     f"{m.get('inodes_free') if m.get('inodes_free') is not None else '?'} inodes free"
                     f" ({safe_str(str(m.get('fstype') or '?'))} at {safe_str(str(m.get('mount') or '?'))})")
            if e.get("fits") is False:
                t.append("  DOES NOT FIT", style="bold red")
            elif e.get("fits"):
                t.append("  fits", style="green")
        con.print(t)
    con.print(Text("formula:", style="bold"))
    for line in fp.formula:
        con.print(Text("  " + line))
    con.print(Text("follows DeepSpeed's code (v0.19.8):", style="dim"))
    from denpex_tui.core.footprint import SOURCES

    for s in SOURCES:
        con.print(Text("  " + s, style="dim"))
    for n in fp.notes:
        con.print(Text("note: " + safe_str(n), style="yellow"))
    for w in fp.warnings:
        _loud(con, w)


def print_verify(res, con: Console) -> None:
    b = res.baseline
    con.print(Text("denpex verify: " + ", ".join(safe_str(s) for s in b.signatures), style="bold"))
    for w in b.where:
        con.print(Text(f"  failing run: {safe_str(w['signature'])} on {rank_word(w['rank'], 'a rank not in its lines')}"
                       f" at step {w['step'] if w['step'] is not None else '?'} ({safe_str(w['path'])}:{w['line']})",
                       style="dim"))
    if not b.where:
        con.print(Text(f"  failing run: step {b.step} ({safe_str(b.source)})", style="dim"))
    steps = [v for v in res.steps.values() if v is not None]
    t = Text(f"  rerun: {count(res.ranks, 'rank')}, ")
    if res.reached:
        t.append(f"every rank reached step {min(steps)} or later (>= {b.step})", style="green")
    else:
        t.append("did NOT get as far" if res.reached is False else "progress not comparable", style="bold red")
    con.print(t)
    if res.still:
        for f in res.still:
            r = Text("  STILL THERE: ", style="bold red")
            r.append(f"{safe_str(f.signature)} on {rank_word(f.rank, 'a rank not in its lines')}  "
                     f"{safe_str(f.path)}:{f.line}")
            con.print(r)
            con.print(Text("      " + f.text))
    else:
        con.print(Text(f"  signature absent on every rank of the rerun ({count(res.ranks, 'rank')})", style="green"))
    for n in res.notes:
        con.print(Text("  " + safe_str(n), style="yellow"))
    con.print(Text("PASS" if res.ok else "FAIL", style="bold green" if res.ok else "bold red"))


def print_rhythm(rh, con: Console) -> None:
    con.print(Text("Rhythm: checkpoint saves each rank completed before the failure", style="bold"))
    for r in rh.runs:
        by: dict[int, list[int]] = {}
        for rank, n in r.saves.items():
            by.setdefault(n, []).append(rank)
        t = Text(f"  {safe_str(r.source)} attempt {r.attempt}: ")
        if r.failed_after is not None:
            t.append(f"rank {r.initiating_rank} failed after {count(r.failed_after, 'save')}", style="bold")
            ins = r.in_save.get(r.initiating_rank)
            if ins:
                t.append(f" (inside save {r.failed_after + 1})")
            t.append("; ")
        t.append(", ".join(f"{ranks_word(rs)}: {n}" for n, rs in sorted(by.items())))
        con.print(t)
    c = rh.consistent
    if c is True:
        con.print(Text(f"  consistent across {count(len(rh.runs), 'run')}: the failure comes after the same number of saves "
                       "(a per-save leak: fds or orphaned inodes)", style="bold yellow"))
    elif c is False:
        con.print(Text("  not the same number of saves across the runs", style="dim"))
    con.print()


def print_control(rep, con: Console) -> None:
    con.print(Text("Compared with the control " + ", ".join(safe_str(p) for p in rep.control), style="bold"))
    for s in rep.shape:
        _loud(con, "job shape: " + s)
    for r in rep.ranks:
        head = Text(f"  rank {r.rank}: {r.new_lines:,} of {count(r.lines, 'line')} {plural(r.new_lines, 'has', 'have')} "
                    "no counterpart")
        con.print(head)
        if r.first_new:
            con.print(Text(f"    first new line      {safe_str(r.first_new.path)}:{r.first_new.line}", style="dim"))
            con.print(Text("      " + r.first_new.text))
        if r.error is not None:
            if r.new_before_error:
                con.print(Text(f"    differs before error {safe_str(r.new_before_error.path)}:{r.new_before_error.line}",
                               style="dim"))
                con.print(Text("      " + r.new_before_error.text, style="bold"))
            else:
                con.print(Text("    no line before its error differs from the control: the error is the first sign",
                               style="dim"))
    con.print()
