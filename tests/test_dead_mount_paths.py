"""A path a log names, on a mount whose lookups never answer (issue 19, item 4): a real FUSE
mount (tests/fuse_stall.py: every lookup under /dead blocks in the kernel until unmounted).
`scan`'s "measured now" check and `probe --logs` say "did not answer in N s" and finish, and
`probe --logs` ends at once on SIGTERM although one of its threads is stuck in D state."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def dead(tmp_path):
    from fusemount import fuse_mount

    daemons: list = []
    with fuse_mount("fuse_stall.py", tmp_path, daemons) as mnt:
        job = tmp_path / "job"
        job.mkdir()
        (job / "rank0.log").write_text(
            "2026-11-29 17:51:13,000 INFO [rank0]: step 99\n"
            "[rank0]: Traceback (most recent call last):\n"
            '[rank0]:   File "train.py", line 10, in <module>\n'
            "[rank0]:     torch.save(sd, path)\n"
            f"[rank0]: OSError: [Errno 28] No space left on device: '{mnt}/dead/ckpt/x.pt'\n")
        yield mnt, job


def _d_state_threads(pid: int) -> int:
    n = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            if open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0] == "D":
                n += 1
        except OSError:
            pass
    return n


def test_scan_measures_a_dead_path_and_says_it_did_not_answer(dead):
    mnt, job = dead
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "denpex_tui", "scan", str(job)], capture_output=True, text=True,
                       timeout=120)
    assert time.monotonic() - t0 < 60
    assert r.returncode == 1, r.stderr
    assert "rank 0 initiating" in r.stdout and "did not answer in 2 s" in r.stdout
    assert f"df -h -- {mnt}/dead/ckpt" in r.stdout  # the verification commands are still there


def test_probe_logs_reads_the_dead_path_as_did_not_answer(dead):
    mnt, job = dead
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "denpex_tui", "probe", "--json", "--logs", str(job)],
                       capture_output=True, text=True, timeout=120)
    assert time.monotonic() - t0 < 60
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    diff = doc["differential"] if isinstance(doc.get("differential"), dict) else doc["differentials"][0]
    assert "did not answer in 2 s" in json.dumps(diff)


def test_probe_logs_ends_on_sigterm_with_a_thread_stuck_in_d_state(dead):
    mnt, job = dead
    p = subprocess.Popen([sys.executable, "-m", "denpex_tui", "probe", "--logs", str(job), "--stream",
                          "--interval", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # wait until some process of the command has a thread stuck in the dead mount
        deadline = time.monotonic() + 60
        stuck = False
        while time.monotonic() < deadline and not stuck:
            pids = [p.pid] + [int(x) for x in subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True,
                                                                 text=True).stdout.split()]
            stuck = any(_d_state_threads(q) for q in pids if os.path.exists(f"/proc/{q}"))
            time.sleep(0.1)
        assert stuck, "no thread reached the dead mount"
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
        assert time.monotonic() - t0 < 3
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
