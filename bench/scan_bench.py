"""Benchmark of the history path (``denpex scan``) against ripgrep on the same files.

Generates a multi-rank torchrun-style job of SIZE (default 1 GiB: 64 ranks, per-rank
stdout.log files of ordinary training lines, one rank's real ENOSPC-while-saving traceback near
the end and the other ranks' real gloo collateral), then reports, as medians of RUNS runs:

* ``rg`` time with the catalog's own patterns (``rg -c -f patterns``), the same files, warm cache;
* ``denpex scan --json`` time, MB/s, and the ratio to rg (target >= 0.3x);
* time to the diagnosis (the scan returns the incident) and peak RSS of the scan process
  (target < 150 MB whatever the size);
* the prefilter backend (hyperscan or re2) and the number of cores used.

Usage: python bench/scan_bench.py [--size-mb 1024] [--runs 3] [--dir /tmp/denpex-bench] [--jobs N]
The benchmark reports; it does not assert. Installs nothing: needs `rg` (apt-get install ripgrep).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUN = "bench0000-0000-0000-0000-000000000000_abcdefgh"
PY = "/opt/venvs/torch/lib/python3.11/site-packages"


def _traceback(rank: int) -> list[str]:
    return [
        f"[rank{rank}]: Traceback (most recent call last):",
        f'[rank{rank}]:   File "{PY}/torch/serialization.py", line 1003, in save',
        f"[rank{rank}]:     _save(",
        f"[rank{rank}]: RuntimeError: basic_ios::clear: iostream error",
        "",
        f"[rank{rank}]: During handling of the above exception, another exception occurred:",
        "",
        f"[rank{rank}]: Traceback (most recent call last):",
        f'[rank{rank}]:   File "{PY}/torch/serialization.py", line 834, in __exit__',
        f"[rank{rank}]:     self.file_like.write_end_of_file()",
        f"[rank{rank}]: RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 263424 vs 263312",
    ]


def _collateral(rank: int) -> list[str]:
    return [
        f"[rank{rank}]: Traceback (most recent call last):",
        f'[rank{rank}]:   File "{PY}/torch/distributed/distributed_c10d.py", line 5356, in barrier',
        f"[rank{rank}]:     work.wait()",
        f"[rank{rank}]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
        f"Connection closed by peer [127.0.0.1]:{40000 + rank}. This is typically caused by a remote worker crashing. "
        "Check the logs of the remote worker before reporting an error. GLHF! 🏖️",
    ]


T0 = datetime(2026, 11, 29, 17, 0, 0)


def _stamp(seconds: float) -> str:
    d = T0 + timedelta(seconds=seconds)
    return f"{d:%Y-%m-%d %H:%M:%S},{d.microsecond // 1000:03d}"


def generate(root: Path, size_mb: int, ranks: int = 64) -> Path:
    """A job whose clock runs as a real one does: two steps a second, each rank's stamps a few
    ms apart, every line's time later than the one before it (no block repeated with its old
    times: a file whose time goes back has those lines raised to the latest, which flatters the
    merge)."""
    per_rank = size_mb * (1 << 20) // ranks
    base = root / "logs" / RUN / "attempt_0"
    fail = ranks // 3
    for r in range(ranks):
        d = base / str(r)
        d.mkdir(parents=True, exist_ok=True)
        step = 0
        with open(d / "stdout.log", "wb") as fh:
            written = 0
            while True:
                lines = []
                for _ in range(2000):
                    step += 1
                    t = step * 0.5 + (r % 7) * 0.003
                    lines.append(
                        f"{_stamp(t)} INFO [rank{r}/{ranks}] train: "
                        f"step {step}/200000 | epoch 0 | loss 2.{step % 9999:04d} | acc 0.383 | grad_norm 2.5044 | "
                        f"lr 3.000e-04 | samples/s 5220.3 | step_time 34.3ms | rss 318MB"
                    )
                    if step % 250 == 0:
                        lines.append(f"{_stamp(t + 0.1)} INFO [rank{r}/{ranks}] train: Saving checkpoint step {step}")
                        lines.append(
                            f"{_stamp(t + 0.11)} INFO [rank{r}/{ranks}] train: Saved checkpoint shard for step {step} "
                            f"to ./checkpoints/rank{r}/step_{step:06d}.pt (1.35 MB, 1 files) in 0.01s"
                        )
                block = ("\n".join(lines) + "\n").encode()
                if written + len(block) > per_rank:
                    break
                fh.write(block)
                written += len(block)
        tail = _traceback(r) if r == fail else _collateral(r)
        (d / "stderr.log").write_text("\n".join(tail) + "\n")
    return root


def patterns_file(path: Path) -> int:
    from denpex_tui.core.catalog import load_catalog

    cat = load_catalog(include_user=False)
    # rg joins the patterns into one alternation, where the catalog's named groups (fields)
    # would collide: the reference runs them as plain groups. Denpex's generic detectors
    # (errno texts, fatal reports, exception lines) add their literals to the same pass, so
    # the reference gets those literals too.
    import re as _re

    from denpex_tui.core.detect import ErrnoDetector, ExceptionDetector, FatalDetector

    pats = [_re.sub(r"\(\?P<\w+>", "(?:", p.source) for s in cat for p in s.patterns]
    for det in (ErrnoDetector, FatalDetector, ExceptionDetector):
        pats += [("(?i)" if ci else "") + "".join("\\" + c if c in "\\.^$|?*+()[]{}" else c for c in t)
                 for t, ci in det.literals]
    path.write_text("\n".join(pats) + "\n")
    return len(pats)


def timed(cmd: list[str]) -> tuple[float, int, str]:
    """Wall time, peak RSS (KiB) of the child, stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return dt, rss if rss > before else -1, p.stdout


def peak_rss_kib(cmd: list[str]) -> int:
    """Peak RSS of one run, measured in a fresh helper so ru_maxrss is this run's alone."""
    code = (
        "import resource,subprocess,sys;"
        "subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL);"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True)
    return int(out.stdout.strip() or 0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    rg = shutil.which("rg")
    if not rg:
        sys.exit("bench needs ripgrep: apt-get install ripgrep")
    root = Path(a.dir or tempfile.mkdtemp(prefix="denpex-bench-"))
    try:
        t0 = time.perf_counter()
        generate(root, a.size_mb)
        total = sum(p.stat().st_size for p in root.rglob("*.log"))
        print(f"generated {total / 1e6:.0f} MB in {time.perf_counter() - t0:.1f} s under {root}")
        pf = root / "patterns.txt"
        n = patterns_file(pf)
        files = [str(p) for p in root.rglob("*.log")]
        # Warm the page cache once.
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL)
        rg_cmd = [rg, "--no-config", "-c", "-f", str(pf), str(root / "logs")]
        scan_cmd = [sys.executable, "-m", "denpex_tui", "scan", "--json", str(root / "logs")]
        if a.jobs:
            scan_cmd += ["--jobs", str(a.jobs)]
        rg_t, scan_t = [], []
        doc = None
        for _ in range(a.runs):
            rg_t.append(timed(rg_cmd)[0])
            dt, _, out = timed(scan_cmd)
            scan_t.append(dt)
            doc = json.loads(out)
        rss = peak_rss_kib(scan_cmd)
        rg_m, sc_m = statistics.median(rg_t), statistics.median(scan_t)
        inc = doc["incidents"][0] if doc and doc["incidents"] else None
        from denpex_tui.core.patterns import HAVE_HYPERSCAN

        result = {
            "bytes": total,
            "patterns": n,
            "cores": os.cpu_count(),
            "backend": "hyperscan" if HAVE_HYPERSCAN and os.environ.get("DENPEX_PREFILTER") != "re2" else "re2",
            "rg_s_median": round(rg_m, 3),
            "scan_s_median": round(sc_m, 3),
            "scan_MBps": round(total / 1e6 / sc_m, 1),
            "rg_MBps": round(total / 1e6 / rg_m, 1),
            "ratio_to_rg": round(rg_m / sc_m, 3),
            "time_to_diagnosis_s": round(sc_m, 3),
            "peak_rss_MB": round(rss / 1024, 1),
            "diagnosis": inc["summary"] if inc else None,
            "runs": a.runs,
        }
        print(json.dumps(result, indent=2))
    finally:
        if not a.keep and not a.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
