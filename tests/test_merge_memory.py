"""The history's merge in bounded memory (issue 18: a 1 GB, 128-file job merged under 200 MB).

Every line of a synthetic many-rank job is a record (each has its time) and the ranks' lines
interleave, so the merged order is nearly one run per line: the worst case for the merge's
arrays. Measured in a fresh process (its peak RSS above the indexes it merges), and its order
checked against the same merge done by a plain sort of (time, file, line)."""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys
from array import array
import numpy as np
from denpex_tui.core.lines.index import FileIndex
from denpex_tui.core.lines.merge import merge_runs
files, per = 64, 32000
idxs = []
for s in range(files):
    idx = FileIndex(f"/rank{s}.log", s)
    # records as given, one per line (the index's own records join lines of one time: see ONE_TIME)
    idx.rec_line = array("q", np.arange(per, dtype=np.int64).tobytes())
    idx.rec_time = array("d", (1.8e9 + np.arange(per) * 0.01 + (s % 7) * 1e-3).tobytes())
    idx.lines = per
    idxs.append(idx)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
runs = merge_runs(idxs, list(range(files)), lambda sid: 0.0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
t = (1.8e9 + np.arange(per) * 0.01)[None, :] + (np.arange(files) % 7)[:, None] * 1e-3
f = np.repeat(np.arange(files), per).reshape(files, per)
want = f.ravel()[np.lexsort((f.ravel(), t.ravel()))]
got = np.repeat(runs.sids, runs.counts)
print(json.dumps({"peak_mb": peak, "same": bool(np.array_equal(got, want)), "records": files * per}))
"""


def test_merging_two_million_interleaved_records_stays_small():
    p = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["same"]
    # 2.05 M records: the merge built per-file pieces and joined them (about 74 bytes a record,
    # 150 MB); taken into arrays made once it is about 38 bytes a record (78 MB)
    assert out["peak_mb"] < 115, out


BATCHED = CHILD.replace("from denpex_tui.core.lines.merge import merge_runs",
                        "from denpex_tui.core.lines.merge import Runs, merge_history") \
    .replace("runs = merge_runs(idxs, list(range(files)), lambda sid: 0.0)",
             "parts = list(merge_history(idxs, list(range(files)), lambda sid: 0.0, batch=1 << 18))\n"
             "runs = Runs(np.concatenate([r.sids for r in parts]), np.concatenate([r.counts for r in parts]))")
# every file's records at one time (a merge's ties at their worst: an index joins its own lines of one
# time, but files share times): slices must split the records of one time between files
ONE_TIME = BATCHED.replace("(1.8e9 + np.arange(per) * 0.01 + (s % 7) * 1e-3)", "np.full(per, 1.8e9)") \
    .replace("t = (1.8e9 + np.arange(per) * 0.01)[None, :] + (np.arange(files) % 7)[:, None] * 1e-3",
             "t = np.full((files, per), 1.8e9)")


def _child(code: str) -> dict:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_historys_merge_in_slices_is_smaller_and_the_same_order():
    """The history is merged in slices of about 256 K records: the order of one sort, and the
    arrays of a slice instead of the whole job's, also when every record has the same time.
    (The peak counts the runs the child keeps, ~24 MB for 2 M interleaved records: one sort
    measured 96 MB, the slices 45 MB, and 13 MB when every record has one time.)"""
    for code in (BATCHED, ONE_TIME):
        out = _child(code)
        assert out["same"]
        assert out["peak_mb"] < 60, out


def test_the_historys_merge_in_slices_is_the_single_merge_on_real_jobs():
    """Every corpus job's real indexes (per-rank files, consoles, untimed stderr files placed
    after their timed siblings), merged in slices of 3 records and in one sort: the same rows."""
    import copy

    import numpy as np

    from denpex_tui.app.timeline import Timeline
    from denpex_tui.core.catalog import load_catalog
    from denpex_tui.core.history import read_history
    from denpex_tui.core.lines.merge import merge_history, merge_runs
    from denpex_tui.core.matcher import Matcher
    from denpex_tui.core.sources import discover
    from helpers import CORPUS

    m = Matcher(load_catalog(include_user=False), error_words=False)
    jobs = 0
    for case in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        got = []
        read_history(discover([str(case)]).sources, m, got.append, index=True, jobs=1, io_timeout=None)
        idx = {h.info.path: h.index for h in got if h.index is not None}
        infos = {h.info.path: h.info for h in got}
        if len(idx) < 2:
            continue
        tl = Timeline()
        sids = [tl._add(p, infos[p], idx[p]) for p in sorted(idx, key=lambda p: infos[p].order)]
        ixs = [tl.sources[s].index for s in sids]
        one = merge_runs(copy.deepcopy(ixs), sids, tl._place)
        parts = list(merge_history(copy.deepcopy(ixs), sids, tl._place, batch=3))
        assert len(parts) > 1, case
        rows = np.concatenate([np.repeat(r.sids, r.counts) for r in parts])
        assert np.array_equal(rows, np.repeat(one.sids, one.counts)), case
        assert parts[-1].last_time == one.last_time, case
        jobs += 1
    assert jobs >= 5
