"""The built-in demo: a realistic 8-rank torchrun job whose rank 5 fills its checkpoint disk.

The framework lines are the real texts torch 2.13, gloo and torchelastic printed in the runs
of ``shared/corpus/enospc_checkpoint_fastfail`` (tracebacks, ``Connection closed by peer``,
``Sending process N closing signal SIGTERM``, the ChildFailedError report); only ranks, pids,
times and paths are changed. ``write_demo_job`` writes it at once (for ``scan --demo``);
``play_demo_job`` writes the same lines in real time (for ``watch --demo``), so a newcomer
sees Denpex work without a cluster.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterator

__all__ = ["DemoLine", "demo_lines", "write_demo_job", "play_demo_job", "DEMO_RANKS", "DEMO_FAILING_RANK",
           "DEMO_DISK_FILE", "SHARD_BYTES", "DEMO_DISK_BYTES"]

DEMO_RANKS = 8
DEMO_FAILING_RANK = 5
_RUN = "c0ffee00-demo-4d3e-9a11-5e3e0c0ffee0_k2x9p1qa"
_JOB = "/scratch/denpex-demo/run01"
_PY = "/opt/venvs/torch/lib/python3.11/site-packages"
_PIDS = {r: 41230 + r for r in range(DEMO_RANKS)}
_AGENT_PID = 41222
# The demo's checkpoint disk: a quota the demo keeps itself (a JSON file in its folder), so that
# rank 5 really runs out of space in something the demo controls; ``watch --demo`` shows these
# readings labelled as the demo's simulated disk, never the real filesystem's.
SHARD_BYTES = 1_350_000
DEMO_DISK_BYTES = 39 * SHARD_BYTES + 200_000  # 4 full saves and 7 shards of the 5th fit; rank 5's does not
DEMO_DISK_FILE = ".denpex-demo-disk.json"


@dataclass
class DemoLine:
    delay: float  # seconds after the previous line (real-time playback)
    rank: int | None  # None: the torchrun agent (console only)
    stream: str  # "stdout" | "stderr" | "console"
    text: str


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}"


def _glog(level: str, t: datetime, where: str) -> str:
    return f"{level}{t.strftime('%m%d %H:%M:%S')}.{t.microsecond:06d} {_AGENT_PID} {where}] "


def demo_lines(start: datetime | None = None, steps: int = 120, fail_step: int = 100, save_every: int = 20,
               step_s: float = 0.25, ckpt_root: str = "/scratch/denpex-demo/run01/checkpoints") -> Iterator[DemoLine]:
    """The job, line by line, in the order the ranks wrote it. Rank 0 announces each save with
    HF Trainer's real line (``Saving model checkpoint to <dir>``), so the fix panel's commands
    get the checkpoint directory."""
    t = start or datetime.now().replace(microsecond=0)
    n = DEMO_RANKS
    fr = DEMO_FAILING_RANK
    hdr = "torch/distributed/run.py:874"
    yield DemoLine(0.0, None, "console", _glog("W", t, hdr))
    yield DemoLine(0.0, None, "console", _glog("W", t, hdr) + "*****************************************")
    yield DemoLine(0.0, None, "console", _glog("W", t, hdr) + "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being overloaded, please further tune the variable for optimal performance in your application as needed. ")
    yield DemoLine(0.0, None, "console", _glog("W", t, hdr) + "*****************************************")
    t += timedelta(seconds=2)
    for r in range(n):
        t += timedelta(milliseconds=7)
        yield DemoLine(0.05, r, "stdout", f"{_ts(t)} INFO [rank{r}/{n}] train: Starting on host gpu-node-01 pid {_PIDS[r]} local_rank {r}, torch 2.13.0+cu128")
    for r in range(n):
        yield DemoLine(0.02, r, "stdout", f"{_ts(t)} INFO [rank{r}/{n}] train: Initialized process group: backend=nccl world_size={n} timeout=600.0s")
    for step in range(10, steps + 1, 10):
        t += timedelta(seconds=step_s * 10)
        for r in range(n):
            tr = t + timedelta(milliseconds=3 * r)
            loss = 2.7 * (0.985 ** step)
            yield DemoLine(step_s if r == 0 else 0.01, r, "stdout",
                           f"{_ts(tr)} INFO [rank{r}/{n}] train: step {step}/{steps} | epoch 0 | loss {loss:.4f} | lr 3.000e-04 | samples/s 5220.3 | step_time 34.3ms")
        if step % save_every:
            continue
        ckpt = f"./checkpoints/rank{{r}}/step_{step:06d}.pt"
        tsave = t + timedelta(milliseconds=110)
        yield DemoLine(0.02, 0, "stdout", f"[INFO|trainer.py:3984] {_ts(tsave)} >> Saving model checkpoint to "
                                          f"{ckpt_root}/checkpoint-{step}")
        for r in range(n):
            tr = t + timedelta(milliseconds=120 + 4 * r)
            yield DemoLine(0.02, r, "stdout", f"{_ts(tr)} INFO [rank{r}/{n}] train: Saving checkpoint step {step}")
            if r == fr and step == fail_step:
                continue
            tr += timedelta(milliseconds=9)
            yield DemoLine(0.03, r, "stdout", f"{_ts(tr)} INFO [rank{r}/{n}] train: Saved checkpoint shard for step {step} to {ckpt.format(r=r)} (1.35 MB, 1 files) in 0.01s")
        if step != fail_step:
            yield DemoLine(0.02, 0, "stdout", f"{_ts(t + timedelta(milliseconds=200))} INFO [rank0/{n}] train: All {n} ranks finished checkpoint step {step}")
            continue
        # Rank fr: torch.save on a full filesystem (the real pair of errors, chained).
        tb = [
            "Traceback (most recent call last):",
            f'  File "{_PY}/torch/serialization.py", line 1003, in save',
            "    _save(",
            f'  File "{_PY}/torch/serialization.py", line 1312, in _save',
            "    zip_file.write_record(name, storage, num_bytes)",
            "RuntimeError: basic_ios::clear: iostream error",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            f'  File "{_JOB}/train.py", line 337, in <module>',
            "    main()",
            f'  File "{_PY}/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 367, in wrapper',
            "    return f(*args, **kwargs)",
            "           ^^^^^^^^^^^^^^^^^^",
            f'  File "{_JOB}/train.py", line 318, in main',
            "    saver.save(step)",
            f'  File "{_JOB}/train.py", line 139, in _save_single',
            "    torch.save(state, path)",
            f'  File "{_PY}/torch/serialization.py", line 1002, in save',
            "    with _open_zipfile_writer(f) as opened_zipfile:",
            f'  File "{_PY}/torch/serialization.py", line 834, in __exit__',
            "    self.file_like.write_end_of_file()",
            "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 263424 vs 263312",
        ]
        tf = t + timedelta(milliseconds=129 + 4 * fr)  # after its "Saving" line, when "Saved" would be
        yield DemoLine(0.05, fr, "stdout", f"{_ts(tf)} ERROR [rank{fr}/{n}] train: Checkpoint save failed for step {step} (attempt 1/1), giving up")
        for line in tb:
            yield DemoLine(0.01, fr, "stderr", f"[rank{fr}]: {line}" if line else "")
        # The others wait in the barrier and lose their peer.
        for r in range(n):
            if r == fr:
                continue
            port = 40000 + 97 * r
            coll = [
                "Traceback (most recent call last):",
                f'  File "{_JOB}/train.py", line 337, in <module>',
                "    main()",
                f'  File "{_JOB}/train.py", line 328, in main',
                "    dist.barrier()",
                f'  File "{_PY}/torch/distributed/distributed_c10d.py", line 5356, in barrier',
                "    work.wait()",
                f"RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:{port}. This is typically caused by a remote worker crashing. Check the logs of the remote worker before reporting an error. GLHF! 🏖️",
            ]
            for i, line in enumerate(coll):
                yield DemoLine(0.2 if i == 0 else 0.005, r, "stderr", f"[rank{r}]: {line}")
        ta = t + timedelta(seconds=1, milliseconds=300)
        where = "torch/distributed/elastic/multiprocessing/api.py:1028"
        for r in range(n):
            if r != fr:
                yield DemoLine(0.01, None, "console", _glog("W", ta, where) + f"Sending process {_PIDS[r]} closing signal SIGTERM")
        yield DemoLine(0.1, None, "console", _glog("E", ta + timedelta(milliseconds=90), "torch/distributed/elastic/multiprocessing/api.py:1002") + f"failed (exitcode: 1) local_rank: {fr} (pid: {_PIDS[fr]}) of binary: /opt/venvs/torch/bin/python3")
        report = [
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "============================================================",
            "train.py FAILED",
            "------------------------------------------------------------",
            "Failures:",
            "  <NO_OTHER_FAILURES>",
            "------------------------------------------------------------",
            "Root Cause (first observed failure):",
            "[0]:",
            f"  time      : {ta.strftime('%Y-%m-%d_%H:%M:%S')}",
            "  host      : gpu-node-01",
            f"  rank      : {fr} (local_rank: {fr})",
            f"  exitcode  : 1 (pid: {_PIDS[fr]})",
            f"  error_file: logs/{_RUN}/attempt_0/{fr}/error.json",
            "  traceback : Traceback (most recent call last):",
            f'    File "{_PY}/torch/serialization.py", line 1003, in save',
            "      _save(",
            "  RuntimeError: basic_ios::clear: iostream error",
            "  ",
            "============================================================",
        ]
        for line in report:
            yield DemoLine(0.005, None, "console", line)
        return


def _paths(root: Path) -> dict:
    return {
        "console": root / "console.log",
        "rank": lambda r, s: root / "logs" / _RUN / "attempt_0" / str(r) / f"{s}.log",
        "error": lambda r: root / "logs" / _RUN / "attempt_0" / str(r) / "error.json",
    }


def _console_line(line: DemoLine) -> str:
    if line.rank is None:
        return line.text
    return f"[default{line.rank}]:{line.text}"


def _error_json(rank: int, when: datetime) -> str:
    stack = (
        "Traceback (most recent call last):\n"
        f'  File "{_PY}/torch/serialization.py", line 1003, in save\n    _save(\n'
        "RuntimeError: basic_ios::clear: iostream error\n"
    )
    return json.dumps({"message": {"message": "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 263424 vs 263312",
                                   "extraInfo": {"py_callstack": stack, "timestamp": str(int(when.timestamp()))}}})


def write_demo_job(root: str | os.PathLike, start: datetime | None = None) -> Path:
    """Write the whole finished job under ``root`` and return ``root``."""
    play_demo_job(root, start=start, realtime=False)
    return Path(root)


def play_demo_job(root: str | os.PathLike, *, start: datetime | None = None, realtime: bool = True,
                  speed: float = 1.0, stop=None) -> Path:
    """Write the job line by line; with ``realtime`` it sleeps between lines (``speed`` x)."""
    root = Path(root)
    p = _paths(root)
    files: dict[Path, object] = {}

    def out(path: Path):
        fh = files.get(path)
        if fh is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            fh = open(path, "a", encoding="utf-8")
            files[path] = fh
        return fh

    for r in range(DEMO_RANKS):  # torchrun creates every rank's files at start
        out(p["rank"](r, "stdout"))
        out(p["rank"](r, "stderr"))
    out(p["console"])
    start = start or datetime.now().replace(microsecond=0)
    used = 0

    def disk(used: int, full: bool = False) -> None:
        tmp = root / (DEMO_DISK_FILE + ".tmp")
        tmp.write_text(json.dumps({"capacity": DEMO_DISK_BYTES, "used": used, "path": str(root / "checkpoints"),
                                   "full": full}))
        os.replace(tmp, root / DEMO_DISK_FILE)

    disk(0)
    try:
        ckpt_root = root / "checkpoints"
        for line in demo_lines(start, ckpt_root=str(ckpt_root)):
            if "train: Saved checkpoint shard" in line.text:
                used += SHARD_BYTES
                disk(used)
            elif "train: Checkpoint save failed" in line.text:  # its shard did not fit: the disk is full
                disk(DEMO_DISK_BYTES, full=True)
            if "Saving model checkpoint to" in line.text:  # the folder the save is about
                (ckpt_root / line.text.rsplit("/", 1)[1]).mkdir(parents=True, exist_ok=True)
            if stop is not None and stop.is_set():
                break
            if realtime and line.delay:
                time.sleep(line.delay / max(speed, 0.01))
            if line.rank is not None:
                fh = out(p["rank"](line.rank, line.stream))
                fh.write(line.text + "\n")
                fh.flush()
            c = out(p["console"])
            c.write(_console_line(line) + "\n")
            c.flush()
        if stop is None or not stop.is_set():
            p["error"](DEMO_FAILING_RANK).write_text(_error_json(DEMO_FAILING_RANK, start + timedelta(seconds=60)))
    finally:
        for fh in files.values():
            fh.close()  # type: ignore[attr-defined]
    return root
