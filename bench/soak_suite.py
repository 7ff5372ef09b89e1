#!/usr/bin/env python3
"""Run the whole test suite N times (default 5) with a CPU hog on every core; print the
pass count (report only). A suite that passes every time passes here 5/5.

    python bench/soak_suite.py              # 5 runs, one busy-loop process per core
    python bench/soak_suite.py --runs 2 -- -x tests/test_live_follower.py

Each run is ``python -m pytest -q -p no:randomly`` from the repository root, with the hogs
(``while True: pass`` at normal priority) running the whole time. Failing test ids are
listed per run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _hog() -> None:
    while True:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    a = ap.parse_args()
    hogs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(a.hogs)]
    for h in hogs:
        h.start()
    passed = 0
    try:
        for i in range(a.runs):
            t0 = time.monotonic()
            r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *a.pytest_args],
                               cwd=ROOT, capture_output=True, text=True)
            dt = time.monotonic() - t0
            last = (r.stdout.strip().splitlines() or [""])[-1]
            failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", r.stdout, re.M)
            ok = r.returncode == 0
            passed += ok
            print(f"run {i + 1}/{a.runs}: {'pass' if ok else 'FAIL'} in {dt:.0f} s: {last}", flush=True)
            for f in failed:
                print(f"    {f}", flush=True)
    finally:
        for h in hogs:
            h.terminate()
    print(f"{passed}/{a.runs} runs passed under {a.hogs} CPU hog(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
