"""Opening a big job: Denpex against lnav and ripgrep on the same bytes, in the same run.

Makes (once, cached in --dir) a real torchrun job with the CPU build of torch: 4 ranks, gloo, a
long run of thousands of steps whose rank 2's torch.save hits the kernel's own ENOSPC on a tiny
tmpfs near the end (``bench/longjob/make.sh``; needs root for the mount and a venv with torch,
``VENV``, default /opt/venvs/torch). Then reports, medians of --runs:

* ``watch``: seconds from its process start to the first frame, to the final diagnosis (the whole
  history read, the headline no longer "so far") and to the end of the merged timeline, and its
  peak RSS, driven headless through Textual's pilot; against lnav's full index of the same folder
  (``lnav -n -r -c ';SELECT count(*) FROM all_logs' DIR``);
* ``scan``: wall time on the folder, beyond its own start-up (measured on a one-line log in the
  same run), against ripgrep with the catalog's patterns on the same folder; and the same bytes
  as one concatenated file;
* with --synthetic-gb N: a synthetic N GB, 128-file job (bench/scan_bench.py's generator):
  watch's merge time and RSS.

Every figure is a ratio against a reference measured in the same run. It reports; it asserts
nothing. Usage: python bench/open_bench.py [--dir /var/tmp/denpex-open] [--steps 13000] [--runs 3]
[--watch-only] [--synthetic-gb 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from scan_bench import generate, patterns_file  # noqa: E402

DRIVER = textwrap.dedent("""
    import asyncio, json, sys, time
    import psutil
    from denpex_tui.core.clock import start_epoch
    T0 = start_epoch()  # the process's own start (the kernel's clock ticks, not psutil's 1 s)
    from denpex_tui.app.factory import WatchOptions, make_app
    root = sys.argv[1]
    app = make_app(WatchOptions(paths=[root], processes=False, probes=False, root=root), include_user=False)
    marks = {}
    async def main():
        async with app.run_test(size=(120, 36)) as pilot:
            marks["first_frame"] = time.time() - T0
            end = time.monotonic() + 600
            while time.monotonic() < end:
                await pilot.pause(0.05)
                st = app.state
                if st.history_complete and st.incident is not None and not st.incident.provisional \
                        and "final_diagnosis" not in marks:
                    marks["final_diagnosis"] = time.time() - T0
                    marks["headline"] = st.diagnosis(time.time())[1]
                if app.timeline.built and app.timeline_worker.idle and "merged" not in marks:
                    marks["merged"] = time.time() - T0
                    marks["rows"] = app.timeline.rows
                if "merged" in marks and ("final_diagnosis" in marks or st.history_complete):
                    break
            marks["rss_mb"] = psutil.Process().memory_info().rss / 2**20
            marks["peak_rss_mb"] = _peak()
    def _peak():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    asyncio.run(main())
    print(json.dumps(marks))
""")


def _time(cmd: list[str], **kw) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB) of the child (GNU time), stdout."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True, **kw)
    dt = time.perf_counter() - t0
    try:
        rss = int(p.stderr.strip().splitlines()[-1]) / 1024
    except (ValueError, IndexError):
        rss = float("nan")
    return dt, rss, p.stdout


def _med(xs):
    xs = [x for x in xs if x == x]
    return round(statistics.median(xs), 3) if xs else None


def make_job(d: Path, steps: int) -> Path:
    """The job's logs (console, torchrun's per-rank files, error.json), hard-linked into their own
    folder: the run's folder also holds its checkpoints, and lnav refuses a folder with an empty
    directory in it ("unable to open checkpoints/rank2/*"), which made its figure an error run."""
    job, view = d / "job", d / "logs-only"
    if not (job / "console.log").is_file():
        d.mkdir(parents=True, exist_ok=True)
        subprocess.run(["bash", str(ROOT / "bench" / "longjob" / "make.sh"), str(job), str(steps)], check=True)
    if not (view / "console.log").is_file():
        for p in job.rglob("*"):
            if p.is_file() and p.suffix in (".log", ".json"):
                q = view / p.relative_to(job)
                q.parent.mkdir(parents=True, exist_ok=True)
                os.link(p, q)
    return view


def watch_marks(job: Path) -> dict:
    p = subprocess.run([sys.executable, "-c", DRIVER, str(job)], capture_output=True, text=True, cwd=ROOT,
                       timeout=900)
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": p.stderr[-2000:]}


def _watch_run(job: Path, rows: dict) -> None:
    t, rss, o = _time(["lnav", "-n", "-r", "-c", ";SELECT count(*) FROM all_logs", str(job)])
    if not any(w.isdigit() and int(w) > 0 for w in o.split()):  # an error run is no reference
        sys.exit(f"lnav did not index {job}: {o.strip()[:300]!r}")
    rows["lnav"].append(t)
    rows["lnav_rss"].append(rss)
    m = watch_marks(job)
    rows["w_first"].append(m.get("first_frame", float("nan")))
    rows["w_diag"].append(m.get("final_diagnosis", float("nan")))
    rows["w_merged"].append(m.get("merged", float("nan")))
    rows["w_rss"].append(m.get("peak_rss_mb", float("nan")))
    rows.setdefault("headline", []).append(m.get("headline", m.get("error")))


def _scan_run(py: list[str], job: Path, one: Path, tiny: Path, pf: Path, rows: dict) -> None:
    t, rss, _o = _time([*py, "scan", "--no-measure", str(job)], cwd=ROOT)
    rows["scan_dir"].append(t)
    rows["scan_rss"].append(rss)
    rows["scan_one"].append(_time([*py, "scan", "--no-measure", str(one)], cwd=ROOT)[0])
    rows["scan_start"].append(_time([*py, "scan", "--no-measure", str(tiny)], cwd=ROOT)[0])
    rows["rg_dir"].append(_time(["rg", "--no-config", "-c", "-f", str(pf), str(job)])[0])
    rows["rg_one"].append(_time(["rg", "--no-config", "-c", "-f", str(pf), str(one)])[0])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/var/tmp/denpex-open")
    ap.add_argument("--steps", type=int, default=13000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--synthetic-gb", type=float, default=0)
    ap.add_argument("--only", choices=("scan", "watch"), help="measure only scan (with ripgrep) or watch (with lnav)")
    a = ap.parse_args()
    for tool in ("lnav", "rg"):
        if not shutil.which(tool):
            sys.exit(f"the benchmark needs {tool}: apt-get install {'ripgrep' if tool == 'rg' else tool}")
    d = Path(a.dir)
    job = make_job(d, a.steps)
    files = sorted(str(p) for p in job.rglob("*") if p.is_file() and p.suffix in (".log", ".json"))
    total = sum(os.path.getsize(f) for f in files)
    one = d / "one" / "all.log"
    if not one.is_file():
        one.parent.mkdir(parents=True, exist_ok=True)
        with open(one, "wb") as out:
            for f in files:
                if f.endswith(".log"):
                    with open(f, "rb") as fh:
                        shutil.copyfileobj(fh, out)
    tiny = d / "tiny" / "rank0.log"
    tiny.parent.mkdir(parents=True, exist_ok=True)
    tiny.write_text("2026-11-29 17:40:10,913 INFO [rank0/4] train: Starting\n")
    pf = d / "patterns.txt"
    patterns_file(pf)
    subprocess.run(["cat", *files, str(one)], stdout=subprocess.DEVNULL)  # warm the page cache
    py = [sys.executable, "-m", "denpex_tui"]
    # as installed (pip compiles a package's bytecode): without it every run compiles all of
    # Denpex's source first, about 0.15 s of the start-up figure on this machine
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "denpex_tui")], check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
    rows: dict[str, list] = {k: [] for k in ("lnav", "lnav_rss", "w_first", "w_diag", "w_merged", "w_rss",
                                              "scan_dir", "scan_rss", "scan_one", "scan_start", "rg_dir", "rg_one")}
    for _ in range(a.runs):
        if a.only != "scan":
            _watch_run(job, rows)
        if a.only != "watch":
            _scan_run(py, job, one, tiny, pf, rows)
    headline = rows.pop("headline", [None])[-1]
    med = {k: _med(v) for k, v in rows.items()}
    start = med["scan_start"] or 0
    out = {
        "job": {"bytes": total, "files": len(files), "headline": headline},
        "medians_s": med,
        "watch_final_diagnosis_vs_lnav": _ratio(med["w_diag"], med["lnav"]),
        "watch_merged_vs_lnav": _ratio(med["w_merged"], med["lnav"]),
        "scan_throughput_vs_rg_dir": _ratio(med["rg_dir"], (med["scan_dir"] or 0) - start),
        "scan_throughput_vs_rg_one_file": _ratio(med["rg_one"], (med["scan_one"] or 0) - start),
        "scan_one_file_vs_folder": _ratio(med["scan_one"], med["scan_dir"]),
        "runs": a.runs,
    }
    if a.synthetic_gb:
        syn = Path(tempfile.mkdtemp(prefix="denpex-syn-", dir=str(d)))
        try:
            generate(syn, int(a.synthetic_gb * 1024), ranks=128)
            ms = [watch_marks(syn) for _ in range(a.runs)]
            out["synthetic"] = {"gb": a.synthetic_gb, "files": 256,
                                "merged_s": _med([m.get("merged", float("nan")) for m in ms]),
                                "peak_rss_mb": _med([m.get("peak_rss_mb", float("nan")) for m in ms])}
        finally:
            shutil.rmtree(syn, ignore_errors=True)
    print(json.dumps(out, indent=2))


def _ratio(a, b):
    return round(a / b, 2) if a and b and b > 0 else None


if __name__ == "__main__":
    main()
