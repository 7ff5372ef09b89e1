"""Trends over a short history of snapshots: fd growth per checkpoint save (the leak signal),
fd / free-bytes / free-inodes rates, and ETAs when, and only when, the trend is steady.

Steadiness rule (one place, tested):

* **over time** (fds, free bytes, free inodes): ordinary least squares over the samples of the
  last ``window_s`` seconds (default 30 min, at most ``max_points``); the trend is *steady* when
  there are at least ``min_points`` samples (default 5) spanning at least ``min_span_s``
  (default 10 s) and R² >= ``r2`` (default 0.8). A constant series is steady with slope 0.
* **per save** (fds opened and not closed per checkpoint save): for every save event of a rank,
  take that rank's last fd sample taken before the save (and after the previous save), giving
  points (save index, fds). Least squares over those; *steady* when there are at least
  ``save_min_points`` points (default 3, i.e. two full save-to-save intervals) and R² >=
  ``save_r2`` (default 0.9), or all the deltas are equal. Save events closer together than
  ``save_merge_s`` (default 0.5 s) are one save (DeepSpeed logs a save on rank 0 and per file).

An ETA is given only for a steady trend that moves toward the limit (fds up, free space down)
and lands within ``max_eta_s`` (default 30 days); otherwise there is no ETA, not a guess.
"""

from __future__ import annotations

import bisect
import math
import os
from collections import deque
from dataclasses import dataclass, field

from .readings import Snapshot


@dataclass
class Fit:
    slope: float  # per second (time fits) or per save (save fits)
    intercept: float
    r2: float
    n: int
    span: float
    steady: bool

    def to_json(self) -> dict:
        return {
            "slope": _r(self.slope, 6),
            "r2": _r(self.r2, 4),
            "n": self.n,
            "span": _r(self.span, 3),
            "steady": self.steady,
        }


def linfit(xs: list[float], ys: list[float]) -> tuple[float, float, float] | None:
    """(slope, intercept, r2) by ordinary least squares; None with < 2 points or zero x-spread.
    A constant y gives slope 0 and r2 1 (a perfectly steady flat line)."""
    n = len(xs)
    if n < 2:
        return None
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys))
    if ss_tot <= 0:
        return 0.0, my, 1.0
    return slope, intercept, max(0.0, 1.0 - ss_res / ss_tot)


def fmt_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 48 * 3600:
        h = seconds / 3600
        return f"{h:.1f} h" if h < 10 else f"{round(h)} h"
    return f"{seconds / 86400:.1f} d"


@dataclass
class ProcessTrend:
    pid: int
    rank: int | None
    local_rank: int | None
    fds_now: int | None
    fd_soft_limit: int | None
    fd_time_fit: Fit | None = None
    fd_save_fit: Fit | None = None
    saves_observed: int = 0
    save_interval_s: float | None = None
    eta_saves: int | None = None
    eta_seconds: float | None = None

    @property
    def fd_growth_per_save(self) -> float | None:
        """fds opened and not closed per save: the fitted slope (>= 3 pre-save points)."""
        return self.fd_save_fit.slope if self.fd_save_fit is not None else None

    @property
    def fd_rate_per_min(self) -> float | None:
        f = self.fd_time_fit
        return f.slope * 60 if f is not None and f.steady else None

    def label(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank} (pid {self.pid})"
        if self.local_rank is not None:
            return f"local rank {self.local_rank} (pid {self.pid})"
        return f"pid {self.pid}"

    def eta_text(self) -> str | None:
        if self.eta_saves is not None:
            s = f"{self.label()}: fd limit reached in ~{self.eta_saves} saves"
            extra = []
            if self.fd_growth_per_save is not None:
                extra.append(f"+{self.fd_growth_per_save:.3g} fds per save")
            if self.save_interval_s is not None:
                extra.append(f"~{fmt_duration(self.eta_saves * self.save_interval_s)} at one save "
                             f"every {fmt_duration(self.save_interval_s)}")
            elif self.eta_seconds is not None:
                extra.append(f"~{fmt_duration(self.eta_seconds)}")
            return s + (f" ({', '.join(extra)})" if extra else "")
        if self.eta_seconds is not None:
            rate = self.fd_rate_per_min
            return (f"{self.label()}: fd limit reached in ~{fmt_duration(self.eta_seconds)}"
                    + (f" (+{rate:.3g} fds/min)" if rate is not None else ""))
        return None

    def to_json(self) -> dict:
        return {
            "pid": self.pid,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "fds": self.fds_now,
            "fd_soft_limit": self.fd_soft_limit,
            "fd_growth_per_save": _r(self.fd_growth_per_save, 3),
            "fd_growth_steady": self.fd_save_fit.steady if self.fd_save_fit else None,
            "fd_rate_per_min": _r(self.fd_rate_per_min, 3),
            "saves_observed": self.saves_observed,
            "save_interval_s": _r(self.save_interval_s, 3),
            "eta_saves": self.eta_saves,
            "eta_seconds": _r(self.eta_seconds, 1),
            "eta": self.eta_text(),
        }


@dataclass
class PathTrend:
    path: str
    bytes_free_now: int | None
    inodes_free_now: int | None
    bytes_fit: Fit | None = None
    inodes_fit: Fit | None = None
    eta_full_seconds: float | None = None
    eta_inodes_seconds: float | None = None

    @property
    def bytes_free_rate(self) -> float | None:
        """bytes/s (negative: filling), only when steady."""
        f = self.bytes_fit
        return f.slope if f is not None and f.steady else None

    @property
    def inodes_free_rate(self) -> float | None:
        f = self.inodes_fit
        return f.slope if f is not None and f.steady else None

    def eta_texts(self) -> list[str]:
        out = []
        if self.eta_full_seconds is not None:
            rate = -(self.bytes_free_rate or 0.0)
            out.append(f"{self.path}: disk full in ~{fmt_duration(self.eta_full_seconds)}"
                       f" ({_human_rate(rate)})")
        if self.eta_inodes_seconds is not None:
            rate = -(self.inodes_free_rate or 0.0)
            out.append(f"{self.path}: inodes exhausted in ~{fmt_duration(self.eta_inodes_seconds)}"
                       f" ({rate * 60:.3g} inodes/min)")
        return out

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "bytes_free_rate": _r(self.bytes_free_rate, 1),
            "inodes_free_rate": _r(self.inodes_free_rate, 4),
            "bytes_steady": self.bytes_fit.steady if self.bytes_fit else None,
            "inodes_steady": self.inodes_fit.steady if self.inodes_fit else None,
            "eta_full_seconds": _r(self.eta_full_seconds, 1),
            "eta_inodes_seconds": _r(self.eta_inodes_seconds, 1),
            "eta": self.eta_texts(),
        }


@dataclass
class _ProcSeries:
    pid: int
    create_time: float | None
    rank: int | None
    local_rank: int | None
    soft: int | None = None
    samples: deque = field(default_factory=deque)  # (t, fds)


@dataclass
class _PathSeries:
    path: str
    samples: deque = field(default_factory=deque)  # (t, bytes_free, inodes_free)


class TrendTracker:
    def __init__(
        self,
        *,
        window_s: float = 1800.0,
        max_points: int = 900,
        min_points: int = 5,
        min_span_s: float = 10.0,
        r2: float = 0.8,
        save_min_points: int = 3,
        save_r2: float = 0.9,
        max_saves: int = 200,
        max_eta_s: float = 30 * 86400.0,
        save_merge_s: float = 0.5,
    ):
        self.window_s = window_s
        self.max_points = max_points
        self.min_points = min_points
        self.min_span_s = min_span_s
        self.r2 = r2
        self.save_min_points = save_min_points
        self.save_r2 = save_r2
        self.max_eta_s = max_eta_s
        self.save_merge_s = save_merge_s
        self._procs: dict[tuple[int, float | None], _ProcSeries] = {}
        self._paths: dict[str, _PathSeries] = {}
        # (rank, local_rank) -> times; (None, None) = every rank saved
        self._saves: deque = deque(maxlen=max_saves)  # (t, rank, local_rank)
        self._last_time: float | None = None

    # -- input ---------------------------------------------------------------------------------

    def ingest(self, snapshot: Snapshot) -> None:
        t = snapshot.time
        self._last_time = t
        live = set()
        for p in snapshot.processes:
            key = (p.pid, p.create_time)
            live.add(key)
            s = self._procs.get(key)
            if s is None:
                s = self._procs[key] = _ProcSeries(p.pid, p.create_time, p.rank, p.local_rank)
            if p.fd_soft_limit is not None:
                s.soft = p.fd_soft_limit
            if p.fds is not None:
                s.samples.append((t, p.fds))
                self._trim(s.samples, t)
        for key in [k for k in self._procs if k not in live]:
            s = self._procs[key]
            if not s.samples or t - s.samples[-1][0] > self.window_s:
                del self._procs[key]
        for pr in snapshot.paths:
            if pr.error is not None or pr.bytes_free is None:
                continue
            ps = self._paths.get(pr.path)
            if ps is None:
                ps = self._paths[pr.path] = _PathSeries(pr.path)
            ps.samples.append((t, pr.bytes_free, pr.inodes_free))
            self._trim(ps.samples, t)

    def note_checkpoint_save(self, rank: int | None, time: float, *,
                             local_rank: int | None = None) -> None:
        """A checkpoint save started at ``time`` (epoch seconds) on global ``rank`` (or, when the
        log only gives it, ``local_rank``); rank=None and local_rank=None mean every rank."""
        self._saves.append((float(time), rank, local_rank))

    def _trim(self, dq: deque, now: float) -> None:
        while dq and (now - dq[0][0] > self.window_s or len(dq) > self.max_points):
            dq.popleft()

    # -- fits ----------------------------------------------------------------------------------

    def _time_fit(self, pts: list[tuple[float, float]]) -> Fit | None:
        if len(pts) < 2:
            return None
        t0 = pts[0][0]
        xs = [p[0] - t0 for p in pts]
        ys = [float(p[1]) for p in pts]
        fit = linfit(xs, ys)
        if fit is None:
            return None
        slope, icpt, r2 = fit
        span = xs[-1] - xs[0]
        steady = len(pts) >= self.min_points and span >= self.min_span_s and r2 >= self.r2
        return Fit(slope, icpt, r2, len(pts), span, steady)

    def _saves_for(self, s: _ProcSeries) -> list[float]:
        out = []
        for t, rank, lrank in self._saves:
            if rank is not None:
                if rank == s.rank:
                    out.append(t)
            elif lrank is not None:
                if lrank == s.local_rank:
                    out.append(t)
            else:
                out.append(t)
        out.sort()
        # several log lines for one save (per-file lines, rank-0 and per-rank lines): merge
        # events closer than save_merge_s
        merged: list[float] = []
        for t in out:
            if not merged or t - merged[-1] > self.save_merge_s:
                merged.append(t)
        return merged

    def _save_fit(self, s: _ProcSeries, saves: list[float]) -> tuple[Fit | None, int]:
        samples = list(s.samples)
        times = [t for t, _f in samples]
        pts: list[tuple[float, float]] = []
        prev = -math.inf
        for k, ts in enumerate(saves):
            # the last sample taken before this save and after the previous one
            i = bisect.bisect_right(times, ts) - 1
            if i >= 0 and times[i] > prev:
                pts.append((float(k), float(samples[i][1])))
            prev = ts
        if len(pts) < 2:
            return None, len(pts)
        fit = linfit([p[0] for p in pts], [p[1] for p in pts])
        if fit is None:
            return None, len(pts)
        slope, icpt, r2 = fit
        deltas = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(pts, pts[1:])]
        equal = len(set(deltas)) == 1
        steady = len(pts) >= self.save_min_points and (r2 >= self.save_r2 or equal)
        if len(pts) < self.save_min_points:
            return Fit(slope, icpt, r2, len(pts), pts[-1][0] - pts[0][0], False), len(pts)
        return Fit(slope, icpt, r2, len(pts), pts[-1][0] - pts[0][0], steady), len(pts)

    # -- output --------------------------------------------------------------------------------

    def process_trends(self) -> list[ProcessTrend]:
        return [self._proc_trend(s) for s in self._procs.values()]

    def process_trend(self, pid: int, create_time: float | None = None) -> ProcessTrend | None:
        cands = [s for (p, ct), s in self._procs.items()
                 if p == pid and (create_time is None or ct == create_time)]
        if not cands:
            return None
        s = max(cands, key=lambda s: s.samples[-1][0] if s.samples else -1)
        return self._proc_trend(s)

    def fd_growth_per_save(self, pid: int, create_time: float | None = None) -> float | None:
        tr = self.process_trend(pid, create_time)
        if tr is None or tr.fd_save_fit is None or tr.fd_save_fit.n < self.save_min_points:
            return None
        return tr.fd_growth_per_save

    def _proc_trend(self, s: _ProcSeries) -> ProcessTrend:
        now_fds = s.samples[-1][1] if s.samples else None
        tr = ProcessTrend(s.pid, s.rank, s.local_rank, now_fds, s.soft)
        tr.fd_time_fit = self._time_fit(list(s.samples))
        saves = self._saves_for(s)
        tr.saves_observed = len(saves)
        if len(saves) >= 2:
            gaps = sorted(b - a for a, b in zip(saves, saves[1:]))
            tr.save_interval_s = gaps[len(gaps) // 2]
        tr.fd_save_fit, _n = self._save_fit(s, saves)
        if now_fds is not None and s.soft is not None:
            room = s.soft - now_fds
            sf = tr.fd_save_fit
            if sf is not None and sf.steady and sf.slope > 0 and room >= 0:
                tr.eta_saves = int(math.ceil(room / sf.slope))
                if tr.save_interval_s is not None:
                    tr.eta_seconds = tr.eta_saves * tr.save_interval_s
            tf = tr.fd_time_fit
            if tr.eta_seconds is None and tf is not None and tf.steady and tf.slope > 0:
                eta = room / tf.slope
                if 0 <= eta <= self.max_eta_s:
                    tr.eta_seconds = eta
        return tr

    def path_trends(self) -> list[PathTrend]:
        return [self._path_trend(s) for s in self._paths.values()]

    def path_trend(self, path: str) -> PathTrend | None:
        s = self._paths.get(os.path.abspath(path)) or self._paths.get(path)
        return self._path_trend(s) if s is not None else None

    def _path_trend(self, s: _PathSeries) -> PathTrend:
        samples = list(s.samples)
        last = samples[-1] if samples else (None, None, None)
        tr = PathTrend(s.path, last[1], last[2])
        tr.bytes_fit = self._time_fit([(t, b) for t, b, _i in samples])
        ipts = [(t, i) for t, _b, i in samples if i is not None]
        tr.inodes_fit = self._time_fit(ipts) if ipts else None
        bf = tr.bytes_fit
        if bf is not None and bf.steady and bf.slope < 0 and last[1]:  # 0 free: full now, not 'in ~1 s'
            eta = last[1] / -bf.slope
            if eta <= self.max_eta_s:
                tr.eta_full_seconds = eta
        inf = tr.inodes_fit
        if inf is not None and inf.steady and inf.slope < 0 and last[2]:
            eta = last[2] / -inf.slope
            if eta <= self.max_eta_s:
                tr.eta_inodes_seconds = eta
        return tr

    def eta_lines(self) -> list[str]:
        out = []
        for tr in sorted(self.process_trends(), key=lambda t: (t.rank is None, t.rank, t.pid)):
            txt = tr.eta_text()
            if txt:
                out.append(txt)
        for ptr in self.path_trends():
            out.extend(ptr.eta_texts())
        return out

    def to_json(self) -> dict:
        return {
            "processes": [t.to_json() for t in self.process_trends()],
            "paths": [t.to_json() for t in self.path_trends()],
            "saves_noted": len(self._saves),
            "eta": self.eta_lines(),
        }


def _human_rate(bps: float) -> str:
    v = abs(bps) * 60
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if v < 1024 or unit == "TiB":
            return f"{v:.3g} {unit}/min"
        v /= 1024
    return f"{v:.3g} TiB/min"  # pragma: no cover


def _r(v: float | None, nd: int) -> float | None:
    return None if v is None else round(v, nd)


__all__ = ["TrendTracker", "ProcessTrend", "PathTrend", "Fit", "linfit", "fmt_duration"]
