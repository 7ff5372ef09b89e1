"""A chunk's line starts, rows of bytes at given offsets, and which rows are the same, in numpy.

A chunk's lines (or its in-text rank tags) repeat a few distinct openings a million times:
gathering each one's first bytes as a row of a matrix and grouping equal rows lets the
regular expressions run once per distinct row instead of once per line (:mod:`.heads`,
:mod:`.chunk`).
"""

from __future__ import annotations

from denpex_tui.core.lines import npy as np

__all__ = ["line_starts", "windows", "distinct_rows", "row_hash"]


def line_starts(data: bytes) -> np.ndarray:
    """Start offsets of the lines of ``data`` (whole lines: it ends with a newline)."""
    nl = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    out = np.empty(len(nl), dtype=np.int64)
    if len(nl):
        out[0] = 0
        out[1:] = nl[:-1] + 1
    return out


def windows(a: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes of ``a`` from each of ``at`` (ascending), zeros past its end."""
    out = np.zeros((len(at), width), dtype=np.uint8)
    inner = int(np.searchsorted(at, len(a) - width, side="right"))
    if inner:  # (a chunk shorter than ``width`` has no full window)
        out[:inner] = np.lib.stride_tricks.sliding_window_view(a, width)[at[:inner]]
    for j in range(inner, len(at)):  # the last few: cut by the end of the chunk
        seg = a[at[j]:]
        out[j, :len(seg)] = seg
    return out


def distinct_rows(win: np.ndarray) -> tuple[list[bytes], np.ndarray]:
    """The distinct rows of a byte matrix (as bytes) and each row's index among them. Rows are
    told apart by a hash, and the grouping is checked row for row: a collision (never seen)
    falls back to sorting the rows themselves. A row equal to the one before it (a rank's lines
    come in runs) is that row again: only the first row of each run is sorted."""
    n, w = win.shape
    wide = -(-w // 8) * 8
    if wide == w:
        padded = np.ascontiguousarray(win)
    else:
        padded = np.zeros((n, wide), dtype=np.uint8)
        padded[:, :w] = win
    u = padded.view(np.uint64)
    run = None  # each row's run, when runs are long enough to be worth it
    if n > 64:
        new = u[1:, 0] != u[:-1, 0]
        for j in range(1, u.shape[1]):
            new |= u[1:, j] != u[:-1, j]
        heads = np.flatnonzero(new)
        if len(heads) * 4 < n:
            run = np.zeros(n, dtype=np.int64)
            run[heads + 1] = 1
            np.cumsum(run, out=run)
            heads += 1
            u = u[np.concatenate((np.zeros(1, dtype=np.int64), heads))]
            win = win[np.concatenate((np.zeros(1, dtype=np.int64), heads))]
    _, first, inv = np.unique(row_hash(u), return_index=True, return_inverse=True)
    inv = inv.ravel()
    if not (u == u[first][inv]).all():
        keys = np.ascontiguousarray(win).view(f"V{w}").ravel()
        _, first, inv = np.unique(keys, return_index=True, return_inverse=True)
        inv = inv.ravel()
    return [win[i].tobytes() for i in first.tolist()], (inv if run is None else inv[run])


def row_hash(u: np.ndarray) -> np.ndarray:
    """One 64-bit hash per row of a uint64 matrix (multiply-xor: rows differing in one byte
    differ)."""
    h = np.zeros(len(u), dtype=np.uint64)
    for j in range(u.shape[1]):
        h = (h ^ u[:, j]) * np.uint64(0x9E3779B97F4A7C15)
    return h
