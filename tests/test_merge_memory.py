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
    idx.rec_line.frombytes(np.arange(per, dtype=np.int64).tobytes())
    idx.rec_time.frombytes((1.8e9 + np.arange(per) * 0.01 + (s % 7) * 1e-3).tobytes())
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
