"""One truth, three faces: on every fixture (the corpus, our runs, the wild logs; consoles and log
dirs), ``scan --json``, the live engine after its history pass and the watch screen's model give
the same initiating rank, signature, path and line, the same collateral set, and the same rank and
source counts; the headline never says ``rank ?`` where a pane names the rank. ``scan --follow``
replaying a case written in slices ends with the same incident too (tests/test_live_parity.py
does the corpus; here our runs)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from denpex_tui.app.feed import summarize
from denpex_tui.app.model import WatchState
from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.scan import scan_paths
from denpex_tui.live.engine import Engine
from denpex_tui.live.events import FindingEvent, HistoryDone, IncidentEvent

FIX = Path(__file__).parent / "fixtures"
CASES = sorted(p for sub in ("corpus", "runs", "wild") for p in (FIX / sub).iterdir()
               if p.is_dir() and (p / "truth.json").is_file()) + [
    FIX / "footprint" / "zero3_nvme_enospc",  # a real ZeRO-Infinity swap file that came back short
    FIX / "footprint" / "zero3_nvme_run"]
CATALOG = load_catalog(include_user=False)


def _root(incidents):
    inc = next((i for i in incidents if i.initiating is not None), None)
    if inc is None:
        return None
    f = inc.initiating
    return (f.signature, f.rank, os.path.realpath(f.path), f.line,
            tuple(sorted((c.rank if c.rank is not None else -1, c.signature) for c in inc.collateral)))


def _scan(case: Path):
    r = scan_paths([str(case)], include_user=False)
    srcs = r.job.sources()
    return _root(r.incidents), len(srcs), r.job.ranks()


async def _engine(paths: list[str]):
    eng = Engine(paths, CATALOG, processes=False, polite=False)
    events = []
    agen = eng.run().__aiter__()
    end = time.monotonic() + 60
    done = False
    nxt = None  # the pending next event: waited for, never cancelled (that would end the generator)
    try:
        while time.monotonic() < end:
            if nxt is None:
                nxt = asyncio.ensure_future(agen.__anext__())
            ready, _ = await asyncio.wait({nxt}, timeout=0.3)
            if not ready:
                if done and await eng.call(eng.unread_bytes) == 0:
                    break
                continue
            try:
                ev = nxt.result()
            except StopAsyncIteration:
                nxt = None
                break
            nxt = None
            events.append(ev)
            done = done or isinstance(ev, HistoryDone)
        events += await eng.call(eng.finish)
    finally:
        eng.stop()
        if nxt is not None:
            nxt.cancel()
            await asyncio.gather(nxt, return_exceptions=True)
        await agen.aclose()
    return eng, events


def _screen(eng: Engine, events: list) -> WatchState:
    """The watch screen's model fed as the app feeds it (app.py on_engine_batch)."""
    st = WatchState()
    st.add_findings([e.finding for e in events if isinstance(e, FindingEvent)])
    incs = [e for e in events if isinstance(e, IncidentEvent)]
    if incs:
        st.set_incidents(incs[-1].incidents)
    for e in events:
        if isinstance(e, HistoryDone):
            st.read_all(e.read, e.total)
    st.set_summary(summarize(eng, set(), set()), time.time())
    return st


@pytest.mark.parametrize("case", CASES, ids=[f"{p.parent.name}/{p.name}" for p in CASES])
def test_scan_engine_and_screen_tell_the_same_diagnosis(case):
    ref, n_sources, ranks = _scan(case)
    eng, events = asyncio.run(_engine([str(case)]))
    assert _root(eng.incidents) == ref
    st = _screen(eng, events)
    assert st.summary.sources == n_sources
    assert sorted(st.summary.ranks) == ranks
    inc = st.incident
    assert (_root([inc]) if inc is not None else None) == ref
    level, headline = st.diagnosis(time.time())
    if inc is not None and inc.initiating is not None:
        failed_first = [r for r, row in st.ranks.items() if row.state == "initiating"]
        if inc.initiating.rank is not None:
            assert failed_first == [inc.initiating.rank]
            assert "rank ?" not in headline
        else:
            assert failed_first == []  # no pane names a rank the headline does not
        assert "so far" not in headline  # the whole history is read: nothing provisional


RUNS = sorted(p for p in (FIX / "runs").iterdir() if p.is_dir() and (p / "truth.json").is_file())


def _replay(src: Path, dst: Path, parts: int = 3) -> None:
    files = [p for p in sorted(src.rglob("*")) if p.is_file() and p.name != "truth.json"]
    slices = []
    for p in files:
        lines = p.read_bytes().splitlines(keepends=True)
        n = max(1, -(-len(lines) // parts))
        slices.append((dst / p.relative_to(src), [b"".join(lines[i:i + n]) for i in range(0, len(lines), n)]))
    for step in range(parts):
        for out, chunks in slices:
            if step < len(chunks):
                out.parent.mkdir(parents=True, exist_ok=True)
                with open(out, "ab") as fh:
                    fh.write(chunks[step])
        time.sleep(0.05)


@pytest.mark.parametrize("case", RUNS, ids=[p.name for p in RUNS])
def test_follow_json_written_in_slices_ends_with_the_scan_incident(tmp_path, case):
    """``scan --follow --json`` on a copy of the case written in three slices while it follows:
    each attempt's last incident event is scan's incident of that attempt, and it says ``provisional`` only while the
    history is being read."""
    dst = tmp_path / case.name
    dst.mkdir()
    writer = threading.Thread(target=_replay, args=(case, dst))
    first = [p for p in sorted(case.rglob("*")) if p.is_file() and p.name != "truth.json"]
    (dst / first[0].relative_to(case)).parent.mkdir(parents=True, exist_ok=True)
    (dst / first[0].relative_to(case)).touch()
    p = subprocess.Popen([sys.executable, "-m", "denpex_tui", "scan", "--follow", "--json", "--no-measure", str(dst)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        writer.start()
        writer.join()
        r = scan_paths([str(dst)], include_user=False)
        refs = {inc.attempt: _root([inc]) for inc in r.incidents}  # one incident per attempt
        events: list[dict] = []
        deadline = time.monotonic() + 60
        os.set_blocking(p.stdout.fileno(), False)
        buf, stable = b"", None
        while time.monotonic() < deadline:  # until the history is read and the incident is scan's, for 1 s
            buf += p.stdout.read() or b""
            *lines, buf = buf.split(b"\n")
            events += [json.loads(x) for x in lines if x.strip()]
            ok = any(e["event"] == "history" and e["complete"] for e in events) and _all_same(events, refs)
            stable = (stable or time.monotonic()) if ok else None
            if stable and time.monotonic() - stable >= 1.0:
                break
            time.sleep(0.1)
    finally:
        p.terminate()
        p.communicate(timeout=20)
    last = {e["attempt"]: e for e in events if e["event"] == "incident"}
    assert _all_same(events, refs), (refs, last)
    complete = next((i for i, e in enumerate(events) if e["event"] == "history" and e["complete"]), None)
    assert complete is not None
    for i, e in enumerate(events):
        if e["event"] == "incident":
            assert e["provisional"] == (i < complete), e["summary"]
            assert not (e["provisional"] and e["confidence"] == "high")


def _all_same(events: list[dict], refs: dict) -> bool:
    """Each attempt's last incident event says what scan says of that attempt."""
    last = {e["attempt"]: e for e in events if e["event"] == "incident"}
    return all(_same(last.get(a), refs.get(a)) for a in set(refs) | set(last))


def _same(inc: dict | None, ref) -> bool:
    """An incident event says what scan says (its collateral in full unless folded)."""
    if inc is None or inc["initiating"] is None:
        return ref is None
    if ref is None:
        return False
    f = inc["initiating"]
    got = (f["signature"], f["rank"], os.path.realpath(f["path"]), f["line"])
    if got != ref[:4]:
        return False
    if "collateral_folded" in inc:
        return True
    coll = tuple(sorted((c["rank"] if c["rank"] is not None else -1, c["signature"]) for c in inc["collateral"]))
    return coll == ref[4]


def test_the_prefilter_never_hides_a_line_a_detector_knows():
    """The prefilter is only a shortcut: on every line of every fixture, a line some detector
    knows is one the prefilter hands to the detectors (the engine's matcher, with its error
    words, and scan's, without, must not see different findings)."""
    from denpex_tui.core.lines.facts import line_facts
    from denpex_tui.core.matcher import Matcher

    m = Matcher(CATALOG, error_words=False)
    hidden = []
    for p in sorted(FIX.rglob("*")):
        if not p.is_file() or p.suffix not in (".log", ".txt", ".out", ".err", "") or p.name == "truth.json":
            continue
        data = p.read_bytes()
        if b"\0" in data[:4096]:
            continue
        if not data.endswith(b"\n"):
            data += b"\n"
        flagged = set(m.prefilter.line_starts(data))
        pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            if pos not in flagged:
                text = line_facts(data[pos:nl]).text
                if m.detect(text) is not None:
                    hidden.append(f"{p.relative_to(FIX)}: {text[:120]}")
            pos = nl + 1
    assert not hidden, hidden[:20]
