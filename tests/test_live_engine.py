"""The live engine = the scan pipeline fed incrementally: same diagnosis, events once."""

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time

from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.demo import DEMO_FAILING_RANK, DEMO_RANKS, play_demo_job
from denpex_tui.live.engine import Engine
from denpex_tui.live.events import FindingEvent, IncidentEvent


def _follow_demo(tmp_path, seconds=6.0):
    events = []

    async def main():
        eng = Engine([str(tmp_path)], load_catalog(include_user=False), processes=False)
        writer = threading.Thread(target=play_demo_job, args=(str(tmp_path),), kwargs=dict(realtime=True, speed=25))

        async def stopper():
            await asyncio.sleep(seconds)
            eng.stop()

        asyncio.get_running_loop().create_task(stopper())
        writer.start()
        async for ev in eng.run():
            events.append(ev)
        writer.join()
        return eng

    return asyncio.run(main()), events


def test_live_diagnosis_matches_scan_and_findings_are_emitted_once(tmp_path):
    eng, events = _follow_demo(tmp_path)
    incidents = [e.incident for e in events if isinstance(e, IncidentEvent)]
    assert incidents, "no incident event"
    last = incidents[-1]
    assert last.initiating.rank == DEMO_FAILING_RANK
    assert last.initiating.signature == "torch.save-write-failed"
    assert {c.rank for c in last.collateral} == set(range(DEMO_RANKS)) - {DEMO_FAILING_RANK}
    keys = [(e.finding.attempt, e.finding.rank, e.finding.signature) for e in events
            if isinstance(e, FindingEvent) and e.finding.rank is not None]
    assert len(keys) == len(set(keys)), "a finding was emitted twice (console and per-rank copies)"
    # Same answer as the history path over the finished files.
    from denpex_tui.core.scan import scan_paths

    r = scan_paths([str(tmp_path)], include_user=False)
    assert r.incidents[0].initiating.rank == last.initiating.rank
    assert len(r.incidents[0].collateral) == len(last.collateral)


def test_scan_follow_json_lines_and_clean_exit_on_sigterm(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "denpex_tui", "scan", "--follow", "--json", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        play_demo_job(str(tmp_path), realtime=True, speed=50)
        time.sleep(2.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    docs = [json.loads(l) for l in out.splitlines() if l.strip()]
    kinds = {d["event"] for d in docs}
    assert {"source", "finding", "incident"} <= kinds
    inc = [d for d in docs if d["event"] == "incident"][-1]
    assert inc["initiating"]["rank"] == DEMO_FAILING_RANK
    assert all(d["state"] in ("added", "rotated", "truncated", "replaced", "deleted", "error", "possibly-lost", "exited")
               for d in docs if d["event"] == "source")


def test_a_rank_that_goes_quiet_while_its_peers_go_on_is_a_stall(tmp_path):
    """Real step lines from the corpus, written live; rank 3 stops after a few steps."""
    from denpex_tui.commands.follow import event_dict
    from denpex_tui.live.stall import StallDetector

    line = ("2026-11-29 18:03:55,271 INFO [rank{r}/4] train: step {s}/200 | epoch 0 | loss 2.0421 | acc 0.383 | "
            "grad_norm 2.5044 | lr 3.000e-04 | samples/s 5220.3 | step_time 34.3ms | rss 318MB\n")
    files = [tmp_path / f"rank{r}.log" for r in range(4)]
    for f in files:
        f.write_text("")
    events = []

    async def main():
        eng = Engine([str(tmp_path)], load_catalog(include_user=False), processes=False)
        eng.stall = StallDetector(k=3, floor_s=2.0, burst_gap_s=0.2)

        async def writer():
            await asyncio.sleep(1.0)
            for s in range(40):
                for r, f in enumerate(files):
                    if r == 3 and s >= 8:
                        continue  # rank 3 hangs at step 8
                    with open(f, "a") as fh:
                        fh.write(line.format(r=r, s=s))
                await asyncio.sleep(0.25)
            eng.stop()

        asyncio.get_running_loop().create_task(writer())
        async for ev in eng.run():
            d = event_dict(eng, ev)
            if d and d["event"] in ("stall", "stall-cleared"):
                events.append(d)

    asyncio.run(main())
    stalls = [e for e in events if e["event"] == "stall" and e["rank"] is not None]
    assert stalls and stalls[0]["rank"] == 3, events
    assert stalls[0]["silent_s"] >= 2.0


def test_nothing_is_left_unread_once_a_history_with_error_files_is_read():
    """torchelastic's error.json is read whole: the engine counts its bytes as read (it counted
    only its message's, so a job with error files never had 'nothing left to read': the replay
    and the tests waited for their deadline, 60 s a case)."""
    from pathlib import Path

    from denpex_tui.live.events import HistoryDone

    case = Path(__file__).parent / "fixtures" / "runs" / "eacces_checkpoint"
    assert list(case.rglob("error.json"))

    async def main():
        eng = Engine([str(case)], load_catalog(include_user=False), processes=False, polite=False)
        seen: list = []

        async def consume():
            async for ev in eng.run():
                seen.append(ev)

        task = asyncio.create_task(consume())
        try:
            end = time.monotonic() + 30
            while time.monotonic() < end:
                await asyncio.sleep(0.1)
                if any(isinstance(e, HistoryDone) for e in seen) and eng.tailer.followers \
                        and await eng.call(eng.unread_bytes) == 0:
                    return 0
            return await eng.call(eng.unread_bytes)
        finally:
            eng.stop()
            await asyncio.wait_for(task, 20)

    assert asyncio.run(main()) == 0
