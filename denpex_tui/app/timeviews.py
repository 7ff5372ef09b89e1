"""Filtered views of the merged timeline (no Textual here): one rank's rows, or every row
without the console's copies of per-rank lines. Built by scanning the merge in the timeline's
thread; a view is a list of merged rows (four bytes per row it shows).
"""

from __future__ import annotations

from array import array

from .lineindex import FileIndex
from .lineinfo import line_facts
from .timeline import Timeline, View

__all__ = ["view_for", "rebuild_default", "console_tags"]


def console_tags(tl: Timeline, sid: int) -> array:
    """A console's rank tags, read now when the fast path skipped them."""
    meta = tl.sources[sid]
    if meta.tags is not None and len(meta.tags) >= tl.counts[sid]:
        return meta.tags
    tags = meta.tags if meta.tags is not None else array("i")
    l0 = len(tags)
    while l0 < tl.counts[sid]:
        got = meta.index.read_lines(l0, 4096)
        if not got:
            break
        for raw, _cut in got:
            f = line_facts(raw[:256].decode("utf-8", "replace"))
            tags.append(FileIndex.tag(f.rank, f.local))
        l0 += len(got)
    meta.tags = tags
    return tags


def view_for(tl: Timeline, rank: int | None, hide_copies: bool) -> View:
    """The rows of one rank (its files, and console lines that name it when they are not
    copies), or of every rank; built by scanning the merge (run it in a thread)."""
    if rank is None and not hide_copies:
        return View(None, "all")
    if rank is None:
        rebuild_default(tl)
        return tl.default
    rows = tl.rows
    keep_src = {sid for sid in range(len(tl.sources)) if tl.source_rank(sid) == rank
                and tl.sources[sid].info.kind != "error-json"}
    consoles = {sid for sid, m in enumerate(tl.sources) if m.info.kind == "console"}
    tags = {sid: console_tags(tl, sid) for sid in consoles}
    out = array("I")
    pos = {sid: 0 for sid in consoles}
    src = tl.src
    for seq in range(rows):
        sid = src[seq]
        if sid in keep_src:
            out.append(seq)
        elif sid in consoles:
            k = pos[sid]
            pos[sid] = k + 1
            t = tags[sid][k] if k < len(tags[sid]) else 0
            if tl.rank_of_tag(sid, t) == rank and not (hide_copies and tl.is_copy(sid, t)):
                out.append(seq)
    return View(out, f"rank {rank}")


def rebuild_default(tl: Timeline) -> None:
    """The default view again (after the rank map changed what is a copy)."""
    out = array("I")
    pos = {sid: 0 for sid, m in enumerate(tl.sources) if m.info.kind == "console"}
    tags = {sid: (tl.sources[sid].tags or array("i")) for sid in pos}
    skip = {sid for sid, m in enumerate(tl.sources) if m.info.kind == "error-json"}
    for seq in range(tl.rows):
        sid = tl.src[seq]
        if sid in pos:
            k = pos[sid]
            pos[sid] = k + 1
            t = tags[sid][k] if k < len(tags[sid]) else 0
            if not tl.is_copy(sid, t):
                out.append(seq)
        elif sid not in skip:
            out.append(seq)
    tl.default = View(out, "default")
