"""The stacks of a job's processes, grouped by identical stack across ranks.

A hang of 1,024 ranks is a few places: "1,021 ranks in all_reduce, seq 6; 3 ranks in torch.save".
Each process's stack comes from py-spy (the main thread's Python frames) or, without it, from
/proc (the kernel's wait channel, the kernel stack where readable, the scheduler state); both are
read by :mod:`denpex_tui.probes.stacks`. Here they are parsed and grouped. Frames, thread names
and argv are untrusted text (a function or file can be named anything): every string is made
safe (:func:`~denpex_tui.core.text.safe_str`) and bounded. Pure: text in, groups out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .ranks import rank_ranges
from .text import safe_str

__all__ = ["Frame", "ProcStack", "StackGroup", "parse_pyspy_json", "group_stacks", "MAX_FRAMES"]

MAX_FRAMES = 64
_KEY_FRAMES = 24  # frames that make two stacks "the same"
_WRAPPERS = {"wrapper", "inner", "_wrap", "wrapped", "decorate_context", "__call__", "_fn", "wrap"}


@dataclass(frozen=True)
class Frame:
    name: str
    file: str  # short file name (py-spy's short_filename)
    line: int

    def describe(self) -> str:
        return f"{self.name} ({self.file}:{self.line})" if self.line else f"{self.name} ({self.file})"

    @property
    def in_torch(self) -> bool:
        return self.file.startswith("torch/") or "/torch/" in self.file


@dataclass
class ProcStack:
    pid: int
    rank: int | None
    how: str  # "py-spy" | "proc" | "none"
    frames: tuple[Frame, ...] = ()  # the main thread's Python frames, innermost first
    threads: int = 0
    state: str = ""  # /proc state letter: R S D T Z
    wchan: str = ""
    kernel: tuple[str, ...] = ()  # /proc/PID/stack, innermost first (root only)
    error: str = ""  # why the Python stack could not be had

    def key(self) -> tuple:
        if self.frames:
            return ("py", tuple((f.name, f.file, f.line) for f in self.frames[:_KEY_FRAMES]))
        return ("proc", self.state, self.wchan, self.kernel[:8])

    def call(self) -> tuple[str, str]:
        """(what it waits in, where the job called it): the torch call made from the job's code,
        else the innermost frame; for a /proc stack, its wait channel."""
        if not self.frames:
            what = self.wchan or (self.kernel[0] if self.kernel else "") or "unknown"
            return (f"{what} ({_STATE.get(self.state, self.state or '?')})", "")
        fs = self.frames
        for i, f in enumerate(fs):
            if f.in_torch and i + 1 < len(fs) and not fs[i + 1].in_torch:
                j = i  # the outermost frame of this torch block that is not a decorator
                while j > 0 and fs[j].name.rsplit(".", 1)[-1] in _WRAPPERS:
                    j -= 1
                api = fs[j].name if fs[j].name.rsplit(".", 1)[-1] not in _WRAPPERS else fs[i].name
                module = fs[j].file[:-3].replace("/", ".") if fs[j].file.endswith(".py") else fs[j].file
                short = "torch." + api if module in ("torch.serialization", "torch.functional") else api
                return (short, fs[i + 1].describe())
        return (fs[0].name, fs[0].describe())


_STATE = {"R": "running", "S": "sleeping", "D": "uninterruptible: I/O", "T": "stopped", "Z": "zombie",
          "t": "traced", "I": "idle"}


@dataclass
class StackGroup:
    ranks: list[int]
    pids: list[int]
    what: str
    where: str
    how: str
    frames: tuple[Frame, ...]
    wchan: str = ""
    state: str = ""
    collective: str = ""  # "seq 6 (nccl:all_reduce ...)" from the dumps, when the ranks agree
    errors: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.pids)

    def headline(self) -> str:
        n = self.count
        who = (f"{n:,} ranks" if n > 1 else "rank") + (f" {rank_ranges(self.ranks)}" if self.ranks else "")
        if not self.ranks:
            who = f"{n:,} process{'es' if n > 1 else ''}"
        s = f"{who} in {self.what}"
        if self.collective:
            s += f", {self.collective}"
        if self.where:
            s += f" (from {self.where})"
        return s

    def to_json(self) -> dict:
        return {"ranks": self.ranks, "pids": self.pids, "count": self.count, "what": self.what, "where": self.where,
                "how": self.how, "state": self.state, "wchan": self.wchan, "collective": self.collective,
                "frames": [{"name": f.name, "file": f.file, "line": f.line} for f in self.frames],
                "errors": self.errors, "headline": self.headline()}


def _str(v, limit: int) -> str:
    return safe_str(str(v)[:limit]) if v is not None else ""


def parse_pyspy_json(text: str, pid: int) -> tuple[tuple[Frame, ...], int]:
    """(the main thread's frames innermost first, number of threads) from ``py-spy dump --json``.
    Raises ValueError when the text is not py-spy's JSON."""
    data = json.loads(text[: 16 << 20])
    if not isinstance(data, list):
        raise ValueError("not a list of threads")
    threads = [t for t in data if isinstance(t, dict)]
    main = next((t for t in threads if t.get("os_thread_id") == pid), None) or next(
        (t for t in threads if t.get("thread_name") == "MainThread"), None) or (threads[0] if threads else None)
    frames: list[Frame] = []
    for f in (main or {}).get("frames") or []:
        if not isinstance(f, dict):
            continue
        line = f.get("line")
        frames.append(Frame(_str(f.get("name"), 200), _str(f.get("short_filename") or f.get("filename"), 300),
                            line if isinstance(line, int) and 0 <= line < 1 << 31 else 0))
        if len(frames) >= MAX_FRAMES:
            break
    return tuple(frames), len(threads)


def group_stacks(stacks: list[ProcStack], collectives: dict[int, str] | None = None) -> list[StackGroup]:
    """Processes with the same stack as one group, the biggest last (the odd ones first, as the
    collective table shows them). ``collectives`` maps a rank to its place in the dumps."""
    by: dict[tuple, list[ProcStack]] = {}
    for s in stacks:
        by.setdefault(s.key(), []).append(s)
    out = []
    for ss in by.values():
        first = ss[0]
        what, where = first.call()
        ranks = sorted({s.rank for s in ss if s.rank is not None})
        coll = ""
        if collectives:
            places = {collectives.get(r, "") for r in ranks}
            if len(places) == 1:
                coll = places.pop()
        out.append(StackGroup(ranks, sorted(s.pid for s in ss), what, where, first.how, first.frames,
                              first.wchan, first.state, coll, sorted({s.error for s in ss if s.error})))
    out.sort(key=lambda g: (g.count, g.ranks[0] if g.ranks else 1 << 30))
    return out
