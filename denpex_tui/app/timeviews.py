"""Filtered views of the merged timeline (no Textual here): one rank's rows, or every row
without the console's copies of per-rank lines. Built in numpy over the merge in the timeline's
thread; a view is a list of merged rows (four bytes per row it shows).
"""

from __future__ import annotations

from array import array

from denpex_tui.core.lines import npy as np

from .timeline import Timeline, View

__all__ = ["view_for", "rebuild_default"]


def _console_rows(tl: Timeline, sid: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, tags) of a console's merged lines."""
    rows = tl.rows_of(sid)
    tags = tl.sources[sid].tags
    t = np.frombuffer(tags, dtype=np.int32)[:len(rows)] if tags is not None else np.zeros(0, np.int32)
    if len(t) < len(rows):
        t = np.concatenate([t, np.zeros(len(rows) - len(t), np.int32)])
    return rows, t


def _pick(tl: Timeline, sid: int, tags: np.ndarray, rank: int | None, hide_copies: bool) -> np.ndarray:
    keep = np.ones(len(tags), dtype=bool)
    uniq = np.distinct(tags).tolist()
    if rank is not None:
        mine = [t for t in uniq if tl.rank_of_tag(sid, t) == rank]
        keep &= np.isin(tags, np.array(mine, dtype=np.int32))
    if hide_copies:
        copies = [t for t in uniq if tl.is_copy(sid, t)]
        if copies:
            keep &= ~np.isin(tags, np.array(copies, dtype=np.int32))
    return keep


def view_for(tl: Timeline, rank: int | None, hide_copies: bool) -> View:
    """The rows of one rank (its files, and console lines that name it when they are not
    copies), or of every rank; built over the merge (run it in a thread)."""
    if rank is None and not hide_copies:
        return View(None, "all")
    if rank is None:
        rebuild_default(tl)
        return tl.default
    parts = []
    mine = []
    gone = set(tl.gone())
    for sid, m in enumerate(tl.sources):
        if sid in gone:
            continue
        if m.info.kind == "console":
            rows, tags = _console_rows(tl, sid)
            parts.append(rows[_pick(tl, sid, tags, rank, hide_copies)])
        elif m.info.kind != "error-json" and tl.source_rank(sid) == rank:
            mine.append(sid)
    if mine:
        parts.append(np.flatnonzero(np.isin(tl.src.view(), np.array(mine))))
    return View(_as_view(parts), f"rank {rank}")


def rebuild_default(tl: Timeline) -> None:
    """The default view again (after the rank map changed what is a copy, or a source's lines
    went with its deleted or truncated file)."""
    parts = []
    special = tl.gone()  # lines that cannot be read back any more
    for sid, m in enumerate(tl.sources):
        if sid in special:
            continue
        if m.info.kind == "console":
            rows, tags = _console_rows(tl, sid)
            parts.append(rows[_pick(tl, sid, tags, None, True)])
            special.append(sid)
        elif m.info.kind == "error-json":
            special.append(sid)
    src = tl.src.view()
    parts.append(np.flatnonzero(~np.isin(src, np.array(special))) if special else np.arange(len(src)))
    tl.default = View(_as_view(parts), "default")


def _as_view(parts: list[np.ndarray]) -> array:
    out = array("I")
    if parts:
        seqs = np.sort(np.concatenate(parts)) if len(parts) > 1 else parts[0]
        out.frombytes(seqs.astype(np.uint32).tobytes())
    return out
