"""Each rank log's steps and checkpoint saves counted once, in scan's pass (core/progress.py's
ProgressTracker, core/progress_pass.py), not by reading every rank log again for the rhythm.

The counts must be what ``read_progress`` gave before: ``progress_main.json`` holds, for every
readable file under tests/fixtures (the corpus, the runs, the wild logs), the Progress fields that
main's ``read_progress`` (at ebe1f53, one sequential read) gave. The tracker must give the same
fed whole, fed in chunks of any size, and fed as ranges joined (as the pass reads a big file)."""

from __future__ import annotations

import json

import pytest
from helpers import CORPUS, ROOT, line_chunks

from denpex_tui.core import history, progress, rhythm
from denpex_tui.core.lines.reader import line_start_after, read_chunks
from denpex_tui.core.patterns import HAVE_HYPERSCAN, LineScan
from denpex_tui.core.progress import ProgressTracker, read_progress
from denpex_tui.core.scan import scan_paths

FIXTURES = ROOT / "tests" / "fixtures"
MAIN = json.loads((ROOT / "tests" / "progress_main.json").read_text())
RUNS = FIXTURES / "runs"
# the real runs whose scan shows a rhythm (checkpoint-related failures)
RHYTHM_CASES = [CORPUS / "fd_leak_emfile", CORPUS / "enospc_checkpoint_fastfail",
                CORPUS / "deepspeed_enospc_checkpoint", RUNS / "deepspeed_enospc", RUNS / "eacces_checkpoint",
                RUNS / "enotempty_stale_checkpoint", RUNS / "erofs_checkpoint", RUNS / "restart_enospc",
                RUNS / "two_node_skew_c10d", RUNS / "two_node_skewed_clock"]


def _fields(p) -> list:
    return [p.last_step, p.last_step_line, p.saves_started, p.saves_done, p.lines]


def _fed(path: str, pieces) -> list:
    t = ProgressTracker(path)
    for piece in pieces:
        t.feed(piece)
    return _fields(t.result())


def _joined(path: str, cuts: list[int], chunk: int = 4096, from_the_end: bool = False) -> tuple[list, int]:
    """The file read as ranges starting at ``cuts`` (line starts), each by its own tracker, joined
    (in order, or the last ones first); and how many save lines waited for the range before theirs."""
    bounds = [0, *cuts]
    trackers, waited = [], 0
    for i, start in enumerate(bounds):
        end = bounds[i + 1] if i + 1 < len(bounds) else None
        t = ProgressTracker(path, at_start=i == 0)
        for _off, data in read_chunks(path, start=start, end=end, chunk=chunk):
            t.feed(data)
        waited += sum(1 for _s, key, _at in t._early or () if key is None)
        trackers.append(t)
    if from_the_end:  # ranges joined before the one they follow is: their waiting saves wait on
        acc = trackers[-1]
        for t in reversed(trackers[:-1]):
            t.join(acc)
            acc = t
    else:
        acc = trackers[0]
        for t in trackers[1:]:
            acc.join(t)
    return _fields(acc.result()), waited


def _whole(path: str) -> bytes:
    return b"".join(d for _o, d in read_chunks(path))


def test_every_fixture_log_is_counted_as_main_counted_it():
    assert len(MAIN) > 900 and any(v[2] or v[3] for v in MAIN.values())
    for rel, want in sorted(MAIN.items()):
        path = str(FIXTURES / rel)
        assert _fields(read_progress(path)) == want, rel
        data = _whole(path)
        assert _fed(path, [data]) == want, rel
        for size in (600, 4096, 1 << 20):
            assert _fed(path, line_chunks(data, size)) == want, (rel, size)
        for k in (2, 3):
            cuts = sorted({c for c in (line_start_after(path, i * len(data) // k) for i in range(1, k))
                           if c and 0 < c < len(data)})
            assert _joined(path, cuts)[0] == want, (rel, cuts)


def test_a_save_line_that_opens_a_range_takes_its_step_from_the_range_before():
    """A range cut right before each save line: one that names no step (DeepSpeed's 'Copying
    complete!') takes the last step line before it, in the range before."""
    waited = 0
    for rel, want in sorted(MAIN.items()):
        if not (want[2] or want[3]):
            continue
        path = str(FIXTURES / rel)
        data = _whole(path)
        starts = progress._save_positions(data)[:6]
        for s in starts:
            if s == 0:
                continue
            got, n = _joined(path, [s])
            assert got == want, (rel, s)
            waited += n
        if len(starts) > 2:  # three ranges, each opening with a save line
            got, n = _joined(path, [c for c in starts[1:3] if c])
            assert got == want, rel
            waited += n
    assert waited >= 4  # real look-backs crossed the cut (the fixtures' few save lines without a step)


def test_save_lines_are_found_alike_by_hyperscan_and_re2(monkeypatch):
    if not HAVE_HYPERSCAN:
        pytest.skip("Hyperscan is not installed")
    for rel in sorted(MAIN):
        data = _whole(str(FIXTURES / rel))
        monkeypatch.setattr(LineScan, "hs_min", 0)
        by_hs = progress._save_positions(data)
        monkeypatch.setattr(LineScan, "hs_min", 1 << 62)
        assert progress._save_positions(data) == by_hs, rel
        monkeypatch.undo()


def test_a_read_cut_at_a_line_counts_what_came_before():
    """verify's read_progress(path, stop_line): what the lines before the failure show."""
    path = next((CORPUS / "enospc_checkpoint_fastfail" / "logs").glob("*/attempt_0/2/stdout.log"))
    whole = read_progress(str(path))
    lines = path.read_bytes().split(b"\n")
    at = next(i for i, ln in enumerate(lines, 1) if b"Checkpoint save failed" in ln)
    cut = read_progress(str(path), at)
    assert cut.lines == at - 1 and cut.last_step == whole.last_step == 100
    assert _fed(str(path), [b"".join(ln + b"\n" for ln in lines[: at - 1])]) == _fields(cut)


def _no_second_read(*_a, **_k):
    raise AssertionError("the rhythm read a log again that the scan had counted")


@pytest.mark.parametrize("case", RHYTHM_CASES, ids=lambda p: p.name)
def test_the_rhythm_takes_the_counts_of_the_scans_pass(case, monkeypatch):
    """Same rhythm as the file read again, with read_progress never called."""
    again = scan_paths([str(case)], jobs=1)  # not counted: rhythm_of reads each rank log itself
    want = [r.to_json() for r in rhythm.rhythm_of(again, case.name)]
    assert want
    once = scan_paths([str(case)], jobs=1, progress_steps_max=1 << 40)
    monkeypatch.setattr(rhythm, "read_progress", _no_second_read)
    assert [r.to_json() for r in rhythm.rhythm_of(once, case.name)] == want
    if case.name == "fd_leak_emfile":  # tests/test_control_rhythm.py's numbers
        assert want[0]["saves_completed"] == {"0": 9, "1": 9, "2": 9, "3": 8}


def test_a_job_above_the_bound_is_not_counted_and_the_rhythm_reads_the_logs():
    case = CORPUS / "fd_leak_emfile"
    r = scan_paths([str(case)], jobs=1, progress_steps_max=1)
    assert all(x.progress is None for x in r.job.results.values())
    assert rhythm.rhythm_of(r, "fd")[0].failed_after == 8


def test_ranges_read_in_parallel_join_into_the_counts_of_one_read(monkeypatch):
    """The pass cut into ranges of 2 KB read by two forked workers, joined (by absorb, or by
    reading a range again when a traceback crosses the cut): every source counted gives what
    read_progress gives, and so does the rhythm."""
    monkeypatch.setattr(history, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(history, "RANGE_BYTES", 2 << 10)
    monkeypatch.setattr(history, "MIN_RANGE_BYTES", 1 << 10)
    cut, refed = [], []
    real_ranges, real_open = history._ranges, history.open_at_end

    def open_at_end(p) -> bool:
        if real_open(p):
            refed.append(p.info.path)
            return True
        return False

    monkeypatch.setattr(history, "_ranges", lambda s, jobs=2: cut.append(s.path) or real_ranges(s, jobs))
    monkeypatch.setattr(history, "open_at_end", open_at_end)
    counted: set[str] = set()
    for case in RHYTHM_CASES[:3] + [CORPUS / "deepspeed_clean_run", CORPUS / "clean_run"]:
        r = scan_paths([str(case)], jobs=2, progress_steps_max=1 << 40)
        for path, res in r.job.results.items():
            if res.progress is not None:
                counted.add(path)
                assert _fields(res.progress) == _fields(read_progress(path)), path
        want = [x.to_json() for x in rhythm.rhythm_of(scan_paths([str(case)], jobs=1), case.name)]
        with monkeypatch.context() as m:
            m.setattr(rhythm, "read_progress", _no_second_read)
            assert [x.to_json() for x in rhythm.rhythm_of(r, case.name)] == want, case.name
    assert len(counted) > 20 and len(counted & set(cut)) > 10 and refed  # rank logs read as ranges, joined


def test_a_console_of_several_ranks_is_not_counted():
    """Its saves are every rank's: the rhythm leaves it out, so the pass stops counting it once
    its lines have named two ranks; a DeepSpeed console of one rank is counted."""
    r = scan_paths([str(CORPUS / "clean_run")], jobs=1, progress_steps_max=1 << 40)
    consoles = [s for s in r.job.sources() if s.kind == "console"]
    assert consoles and all(len(s.ranks) > 1 and r.job.results[s.path].progress is None for s in consoles)
    ds = scan_paths([str(CORPUS / "deepspeed_clean_run")], jobs=1, progress_steps_max=1 << 40)
    one = [s for s in ds.job.sources() if s.kind == "console" and len(s.ranks) == 1]
    assert one and all(ds.job.results[s.path].progress.saves_done == [20, 40, 60, 80, 100] for s in one)


def test_the_cuts_change_nothing_when_look_backs_are_short(monkeypatch):
    """The fixtures are small beside the 256 KiB look-back and 64 KiB windows: with both cut to a
    few KiB (and Hyperscan searching every chunk), save lines look back across chunks and ranges
    and the last step is looked for window by window; fed in any chunks or as ranges, every
    file's count is still its one read's."""
    monkeypatch.setattr(progress, "_BACK", 3000)
    monkeypatch.setattr(progress, "_WINDOW", 1000)
    monkeypatch.setattr(LineScan, "hs_min", 2000)
    waited = 0
    for rel, was in sorted(MAIN.items()):
        if was[0] is None and not (was[2] or was[3]):
            continue
        path = str(FIXTURES / rel)
        want = _fields(read_progress(path))
        data = _whole(path)
        for size in (600, 4096):
            assert _fed(path, line_chunks(data, size)) == want, (rel, size)
        cuts = [c for c in progress._save_positions(data)[1:4]]
        cuts += [c for c in (line_start_after(path, i * len(data) // 3) for i in (1, 2)) if c and c < len(data)]
        for c in sorted(set(cuts)):
            got, n = _joined(path, [c], chunk=1024)
            assert got == want, (rel, c)
            waited += n
        got, n = _joined(path, sorted(set(cuts)), chunk=1024)
        assert got == want, rel
        assert _joined(path, sorted(set(cuts)), chunk=1024, from_the_end=True)[0] == want, rel
        waited += n
    assert waited >= 4


def test_the_counts_travel_between_processes():
    """A range's tracker crosses from its worker to the parent (pickled): what it keeps is
    bounded, whatever chunk it was fed last."""
    import pickle

    path = str(next((CORPUS / "clean_run" / "logs").glob("*/attempt_0/0/stdout.log")))
    data = _whole(path)
    for pieces in ([data], line_chunks(data, 600)):
        t = ProgressTracker(path, at_start=False)
        for piece in pieces:
            t.feed(piece)
        back = pickle.loads(pickle.dumps(t))
        assert _fields(back.result()) == _fields(t.result())
        assert len(back._tail) <= progress._BACK and len(back._head) <= progress._BACK
