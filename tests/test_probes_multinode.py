"""The fleet against real processes: the real `denpex probe --stream --json` behind real
transports (a local OpenSSH server on 127.0.0.1, a local Slurm), and the faults a node can
have: dead, garbage, slow to answer, late, dying mid-stream, another schema version."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from denpex_tui.probes.fleet import Fleet
from denpex_tui.probes.transports import ChannelSpec, slurm_channels

from localcluster import DENPEX, start_slurm, start_sshd, stop_slurm, stop_sshd, wait_for

PROBE = f"{DENPEX} probe --stream --json --interval 0.3"


def sh(node: str, cmd: str) -> ChannelSpec:
    return ChannelSpec(f"cmd {node}", ["/bin/sh", "-c", cmd], [node])


def run_until(fleet: Fleet, cond, timeout: float, what: str):
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        t0 = time.monotonic()
        fleet.step(0.1)
        assert time.monotonic() - t0 < 3.0, "one step of the fleet stalled"
        if cond():
            return
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}: {fleet.node_json()}")


def status(fleet: Fleet, node: str) -> str:
    return fleet.status(fleet.nodes[node])[0]


@pytest.fixture
def fleet_of():
    made = []

    def make(specs, **kw):
        f = Fleet(specs, **kw)
        f.start()
        made.append(f)
        return f

    yield make
    for f in made:
        f.stop()


def test_faulty_nodes_never_stall_the_merge(fleet_of):
    """One good node and one of each fault, all at once."""
    fleet = fleet_of([
        sh("good", PROBE),
        sh("dead", "echo 'ssh: connect to host dead port 22: Connection refused' >&2; exit 255"),
        sh("banner", f"echo 'Welcome to banner (motd)'; exec {PROBE}"),
        sh("garbage", f"exec {DENPEX} scan --demo"),  # another command's real output
        sh("slow", f"sleep 2; exec {PROBE}"),
        sh("hang", "exec sleep 600"),
        sh("dies", f"exec {DENPEX} probe --stream --json --interval 0.2 --count 3"),
        sh("future", f"{PROBE} | sed -u 's/\"schema\": 1,/\"schema\": 2,/'"),
    ], interval=0.3, answer_timeout=6.0)
    run_until(fleet, lambda: status(fleet, "good") == "ok", 30, "the good node")
    merged = fleet.merged_json()  # at once, while others are still silent
    assert {p["node"] for p in merged["paths"]} >= {"good"}
    run_until(fleet, lambda: status(fleet, "slow") == "ok" and status(fleet, "dies") == "exited"
              and status(fleet, "future") == "other-schema", 30, "slow, dies, future")
    st = {n["node"]: n for n in fleet.node_json()}
    assert st["dead"]["status"] == "no-answer" and "Connection refused" in st["dead"]["detail"]
    assert st["banner"]["status"] == "ok" and st["banner"]["garbage_lines"] == 1
    assert st["slow"]["answered_after_s"] >= 2.0 and st["good"]["answered_after_s"] < st["slow"]["answered_after_s"]
    assert "died mid-stream" in st["dies"]["detail"] and st["dies"]["snapshots"] >= 3
    assert "schema 2" in st["future"]["detail"] and "schema 1" in st["future"]["detail"]
    assert st["hang"]["status"] in ("connecting", "no-answer")  # no-answer after 6 s
    run_until(fleet, lambda: status(fleet, "hang") == "no-answer", 15, "the hung node's timeout")
    assert "no snapshot in 6 s" in fleet.status(fleet.nodes["hang"])[1]
    run_until(fleet, lambda: status(fleet, "garbage") == "no-answer", 15, "garbage node's timeout")
    why = fleet.status(fleet.nodes["garbage"])[1]
    assert "not snapshots" in why or "only garbage" in why, why
    merged = fleet.merged_json()
    nodes_with_readings = {p["node"] for p in merged["paths"]}
    assert {"good", "banner", "slow", "dies"} <= nodes_with_readings
    assert not nodes_with_readings & {"dead", "garbage", "hang", "future"}
    assert all(p["node"] for p in merged["paths"] + merged["processes"])
    assert set(merged["clock"]["offsets"]) >= {"good", "slow"}


def test_dead_node_is_retried_with_backoff(fleet_of):
    fleet = fleet_of([sh("dead", "echo 'ssh: Could not resolve hostname dead' >&2; exit 255")],
                     interval=0.3, answer_timeout=5)
    starts = []
    last = None
    t_end = time.monotonic() + 12
    while time.monotonic() < t_end and len(starts) < 4:
        fleet.step(0.05)
        st = fleet.nodes["dead"]
        if st.channel is not None and st.channel is not last:
            starts.append(time.monotonic())
            last = st.channel
    assert len(starts) == 4, starts
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert gaps[0] >= 0.9 and gaps[1] >= 1.9 and gaps[2] >= 3.9, gaps  # 1, 2, 4 s
    assert fleet.nodes["dead"].retries == 3


def test_a_node_that_goes_quiet_is_late_then_a_node_that_comes_back_is_ok(fleet_of):
    fleet = fleet_of([sh("n1", f"exec {DENPEX} probe --stream --json --interval 30")],
                     interval=0.3, answer_timeout=10, late_after=1.0)
    run_until(fleet, lambda: status(fleet, "n1") == "ok", 30, "first snapshot")
    run_until(fleet, lambda: status(fleet, "n1") == "late", 10, "late")
    assert "last snapshot" in fleet.status(fleet.nodes["n1"])[1]
    assert fleet.merged().paths  # the last readings are still shown


def test_truncated_last_line_counts_as_garbage_and_the_node_as_exited(fleet_of):
    fleet = fleet_of([sh("cut", f"{DENPEX} probe --stream --json --interval 0.2 --count 2 "
                                "| head -c 1500")], interval=0.3, answer_timeout=10)
    run_until(fleet, lambda: fleet.nodes["cut"].channel is None, 30, "the stream to end")
    st = fleet.nodes["cut"]
    assert st.source.garbage >= 1
    assert "truncated" in (st.first_garbage or "")


# -- through a real OpenSSH server on 127.0.0.1 --------------------------------------------


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    s = start_sshd(str(tmp_path_factory.mktemp("sshd")))
    yield s
    stop_sshd(s)


def test_probe_hosts_through_ssh_merges_and_reports_the_dead_node(sshd):
    tpl = sshd.template(f"{DENPEX} probe --stream --json --path /tmp")
    r = subprocess.run([DENPEX, "probe", "--hosts", "n1,n2,deadnode", "--probe-cmd", tpl, "--json",
                        "--wait", "25"], capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    st = {n["node"]: n for n in d["nodes"]}
    assert st["n1"]["status"] == "ok" and st["n2"]["status"] == "ok", st
    assert st["deadnode"]["status"] == "no-answer"
    assert "Connection refused" in st["deadnode"]["detail"]  # ssh's own message
    assert {(p["node"], p["path"]) for p in d["paths"]} >= {("n1", "/tmp"), ("n2", "/tmp")}
    assert all(p["node"] in ("n1", "n2") for p in d["paths"] + d["processes"])
    assert d["merged"] is True and d["schema"] == 1
    assert st["n1"]["clock"]["samples"] >= 1 and abs(st["n1"]["clock"]["offset_s"]) < 5


def test_ssh_stream_is_read_live_and_a_killed_remote_is_retried(sshd, fleet_of):
    from denpex_tui.probes.transports import template_channels

    specs = template_channels(["n1", "n3"], sshd.template(f"{DENPEX} probe --stream --json --interval 0.3"))
    fleet = fleet_of(specs, interval=0.3, answer_timeout=20)
    run_until(fleet, lambda: all(status(fleet, n) == "ok" for n in ("n1", "n3")), 40, "both nodes")
    run_until(fleet, lambda: fleet.nodes["n1"].source.snapshots >= 4, 20, "several snapshots")
    off = fleet.skew.offsets()["n1"]
    assert off.samples >= 4 and abs(off.offset_s) < 1.0  # one clock: the offset is the delay
    # the ssh client dies mid-stream (as when a node reboots): exited, retried, ok again
    os.killpg(fleet.nodes["n3"].channel.proc.pid, 9)  # the session we started: sh and its ssh
    run_until(fleet, lambda: status(fleet, "n3") == "exited", 10, "n3 exited")
    assert "died mid-stream" in fleet.status(fleet.nodes["n3"])[1]
    run_until(fleet, lambda: status(fleet, "n3") == "ok" and fleet.nodes["n3"].restarts >= 1, 40,
              "n3 back after a retry")


# -- through a real Slurm (munged, slurmctld, slurmd per node name) -------------------------


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    s = start_slurm(str(tmp_path_factory.mktemp("slurm")))
    yield s
    stop_slurm(s)


def test_probe_slurm_job_runs_one_real_step_over_every_node(slurm):
    job = slurm.job()
    r = subprocess.run([DENPEX, "probe", "--slurm-job", job, "--json", "--wait", "40"],
                       capture_output=True, text=True, timeout=120, env=slurm.env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    st = {n["node"]: n for n in d["nodes"]}
    assert set(st) == {"n1", "n2", "n3"}
    assert all(n["status"] == "ok" for n in st.values()), st
    assert all(n["transport"] == f"srun step of job {job}" for n in st.values())
    assert {p["node"] for p in d["paths"]} == {"n1", "n2", "n3"}


def test_slurm_job_output_files_are_the_logs_watch_follows(slurm):
    out = os.path.join(slurm.root, "train-%j.out")
    r = slurm.run("sbatch", "--parsable", "--nodes=1", "-o", out, "--wrap", "echo step 1; sleep 900")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    slurm.jobs.append(job)
    from denpex_tui.probes.transports import slurm_job_output

    want = out.replace("%j", job)
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = slurm.conf
    try:
        wait_for(lambda: os.path.exists(want), 60, "the job's output file")
        assert slurm_job_output(job) == [want]
    finally:
        slurm.run("scancel", job)
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


def test_slurm_node_whose_task_dies_is_retried_alone(slurm, fleet_of):
    job = slurm.job()
    nodes = (slurm.nodes, "n[1-3]", "RUNNING")
    # every task streams; the task on n2 fails after two snapshots, once (a marker file)
    mark = os.path.join(slurm.root, "n2-failed-once")
    remote = ["sh", "-c", f'if [ "$SLURMD_NODENAME" = n2 ] && [ ! -e {mark} ]; then touch {mark}; '
              f'{DENPEX} probe --stream --json --interval 0.3 --count 2; exit 3; '
              f'else exec {DENPEX} probe --stream --json --interval 0.3; fi']
    [spec] = slurm_channels(job, nodes=nodes, remote=remote)
    spec.env = slurm.env
    orig = spec.retry_one

    def retry_one(n):
        one = orig(n)
        one.env = slurm.env
        return one

    spec.retry_one = retry_one
    fleet = fleet_of([spec], interval=0.3, answer_timeout=40)
    run_until(fleet, lambda: all(status(fleet, n) == "ok" for n in ("n1", "n3"))
              and fleet.nodes["n2"].source.snapshots >= 1, 60, "the step's first snapshots")
    run_until(fleet, lambda: fleet.nodes["n2"].alone and fleet.nodes["n2"].channel is not None,
              60, "n2 retried with its own one-node step")
    assert "--nodelist=n2" in fleet.nodes["n2"].channel.spec.argv
    assert "exit code 3" in fleet.nodes["n2"].ended and fleet.nodes["n2"].ended_kind == "exited"
    assert fleet.nodes["n1"].channel.spec.labelled  # the others stay on the shared step
    run_until(fleet, lambda: fleet.nodes["n2"].source.snapshots >= 3, 60, "n2 streaming again")


def test_probe_hosts_human_view_names_each_node_and_escapes_what_nodes_send():
    # n1 streams; "evil" answers with an ssh-like error carrying escape sequences
    tpl = ("sh -c 'if [ \"$0\" = n1 ]; then exec " + DENPEX + " probe --stream --json --interval 0.3; "
           "else printf \"ssh: \\033]0;owned\\007\\033[2J host %s unreachable\\n\" \"$0\" >&2; exit 255; fi' {host}")
    r = subprocess.run([DENPEX, "probe", "--hosts", "n1,evil", "--probe-cmd", tpl, "--wait", "20"],
                       capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "\x1b" not in out and "\x07" not in out
    assert "n1" in out and "== node n1" in out and "/dev/shm" in out
    line = [ln for ln in out.splitlines() if ln.strip().startswith("evil")][0]
    assert "no-answer" in line and "\\x1b]0;owned" in line and "unreachable" in line


def test_a_transport_that_ignores_sigterm_never_blocks_a_step(fleet_of):
    fleet = fleet_of([sh("stubborn", "trap '' TERM; exec sleep 600"), sh("good", PROBE)],
                     interval=0.3, answer_timeout=2.0)
    proc = fleet.nodes["stubborn"].channel.proc
    t_end = time.monotonic() + 20
    while time.monotonic() < t_end and proc.poll() is None:
        t0 = time.monotonic()
        fleet.step(0.1)
        assert time.monotonic() - t0 < 1.0  # the SIGTERM it ignores is not waited for
    assert proc.poll() is not None and proc.returncode == -9  # SIGKILLed 2 s after the SIGTERM
    st = fleet.nodes["stubborn"]
    assert st.ended_kind == "no-answer" and "no snapshot in 2 s" in st.ended  # (and retried since)
    assert status(fleet, "good") == "ok"


def test_watch_through_a_real_slurm_step_shows_each_ranks_remote_process(slurm, tmp_path):
    """watch over the local Slurm: one real srun step, each node's probe measuring the ranks
    that run there (n1: ranks 0-3, n2: ranks 4-7; the demo job's logs name rank 5 failing)."""
    import asyncio
    import sys

    from test_app_support import make_app, settle, write_failed_job

    from denpex_tui.app.widgets.ranks import RankTable

    root = write_failed_job(tmp_path / "run01")
    ranks = [subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE="8")) for r in range(8)]
    try:
        job = slurm.job(nodes=2)
        pids = {n: " ".join(str(ranks[r].pid) for r in rs) for n, rs in (("n1", range(4)), ("n2", range(4, 8)))}
        remote = ["sh", "-c", f'case "$SLURMD_NODENAME" in n1) p="{pids["n1"]}";; *) p="{pids["n2"]}";; esac; '
                  f'exec {DENPEX} probe --stream --json --interval 0.5 --pid $p']
        [spec] = slurm_channels(job, nodes=(["n1", "n2"], "n[1-2]", "RUNNING"), remote=remote)
        spec.env = slurm.env

        async def main():
            app = make_app(root, probes=True, probe_specs=[spec], probe_wait=40)
            async with app.run_test(size=(200, 50)) as pilot:
                await settle(app, pilot)
                table = app.query_one(RankTable)
                want = {"1": str(ranks[1].pid), "5": str(ranks[5].pid)}
                t_end = time.monotonic() + 60
                got = {}
                while time.monotonic() < t_end:
                    await pilot.pause(0.3)
                    got = {r: table.get_cell(r, "pid").plain for r in want}
                    if got == want:
                        break
                assert got == want
                procs = app._rank_procs
                assert procs[1].node == "n1" and procs[5].node == "n2"
                assert procs[5].fds is not None and procs[5].fd_soft_limit
                assert {n["node"]: n["status"] for n in app.query_one("#gauges").snapshot.nodes} == \
                    {"n1": "ok", "n2": "ok"}

        asyncio.run(main())
    finally:
        for p in ranks:
            p.kill()
            p.wait()


def test_a_node_that_answers_late_is_ok_and_says_so(fleet_of):
    fleet = fleet_of([sh("slow", f"sleep 2; exec {PROBE}")], interval=0.3, answer_timeout=20,
                     late_after=1.0)
    run_until(fleet, lambda: status(fleet, "slow") == "ok", 30, "the slow node's first snapshot")
    import re

    assert re.search(r"answered late: first snapshot after [2-9] s", fleet.status(fleet.nodes["slow"])[1])
