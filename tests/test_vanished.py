"""Silent and vanished ranks in log dirs without the console (issue 21, mechanism 4), on real runs:
where each rank stopped (its last progress counter, its last timestamped line) names the rank
that died without a word while its peers lost their connection to it; a rank whose log just ends
when the job is torn down is collateral."""

import os
from pathlib import Path

import pytest

from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.lines.facts import line_progress
from denpex_tui.core.matcher import Matcher
from denpex_tui.core.model import SourceInfo
from denpex_tui.core.pipeline import SourceProcessor
from denpex_tui.core.scan import scan_paths

RUNS = Path(__file__).parent / "fixtures" / "runs"
WILD = Path(__file__).parent / "fixtures" / "wild"


def _files(d: Path) -> list[str]:
    return sorted(os.path.join(dp, f) for dp, _, fs in os.walk(d) for f in fs if f != "truth.json")


def _root(paths):
    r = scan_paths(paths, include_user=False)
    return next(i for i in r.incidents if i.initiating is not None)


def _line(path: Path, needle: bytes) -> bytes:
    return next(ln for ln in path.read_bytes().splitlines() if needle in ln)


def test_progress_counters_of_real_lines():
    tq = next(RUNS.glob("tqdm_oom_logdir_only/logs/*/attempt_0/2/stderr.log"))
    # one "line" of CR-redrawn tqdm bars: the counter as last drawn
    p = line_progress(tq.read_bytes().rstrip(b"\n"))
    assert (p.step, p.total, p.kind) == (21, 400, "bar")
    step = _line(next(RUNS.glob("oom_cgroup_kill/logs/*/attempt_0/2/stdout.log")), b"step 20/400")
    assert (line_progress(step).step, line_progress(step).total) == (20, 400)
    save = _line(next(RUNS.glob("fr_kill9_waiting/logs/*/attempt_0/1/stdout.log")), b"Saving checkpoint step 20")
    assert (line_progress(save).step, line_progress(save).total) == (20, None)
    glued = _line(WILD / "c_myria3d_slurm_step_cancelled_glued_progress" / "log.txt", b"CANCELLED")
    assert (line_progress(glued).step, line_progress(glued).total) == (31, 67)
    assert line_progress(_line(next(RUNS.glob("tqdm_oom_logdir_only/logs/*/attempt_0/2/stdout.log")), b"pid")) is None
    # a bar of one loop is compared only with a bar of the same total
    assert not line_progress(glued).comparable(p)


def test_oom_killed_rank_seen_only_in_the_log_dir_with_tqdm():
    inc = _root(_files(RUNS / "tqdm_oom_logdir_only"))
    assert inc.initiating.rank == 2 and inc.initiating.signature == "proc.killed"
    assert inc.confidence == "medium"
    assert sorted(c.rank for c in inc.collateral) == [0, 1, 3]
    assert {c.rank: c.signature for c in inc.collateral}[0] == "proc.log-ended"
    assert any("21/400" in e and "28/400" in e for e in inc.evidence)


@pytest.mark.parametrize("case,rank,conf", [
    ("oom_cgroup_kill", 2, "medium"),  # its step counter stopped at 20/400, the others at 40/400
    ("fr_kill9_waiting", 1, "medium"),  # same step; its last line 3 s older than any other's
    ("kill9_rank", 1, "low"),  # ranks 1 and 3 both silent at 30/200: undecidable, said so
])
def test_killed_rank_from_its_log_dir_alone(case, rank, conf):
    inc = _root(_files(RUNS / case / "logs"))
    assert inc.initiating.signature == "proc.killed" and inc.initiating.rank == rank
    assert inc.confidence == conf
    assert sorted(c.rank for c in inc.collateral) == sorted({0, 1, 2, 3} - {rank})
    if conf == "low":
        assert any("cannot be told" in e for e in inc.evidence)
        assert any(h["rank"] == 3 for h in inc.hypotheses)


def test_the_launchers_word_still_decides_when_the_console_is_there():
    inc = _root(_files(RUNS / "kill9_rank"))
    assert inc.initiating.rank == 1 and "per the launcher" in inc.summary


@pytest.mark.parametrize("case", ["segfault_rank", "ranks_filter_hides_culprit", "enomem_rlimit"])
def test_a_rank_whose_log_just_ends_is_collateral(case):
    import json

    t = json.loads((RUNS / case / "truth.json").read_text())
    inc = _root(_files(RUNS / case / "logs"))
    assert inc.initiating.rank == t["initiating_rank"]
    assert sorted(c.rank for c in inc.collateral) == sorted(t["collateral_ranks"])


def test_a_rank_only_named_in_an_excerpt_is_not_a_suspect():
    # A pasted excerpt: rank 2 is named, prints nothing, but nothing shows where it stopped.
    inc = _root(_files(WILD / "b_nccl_ofi_undeliverable_rank3"))
    assert inc.initiating.signature == "nccl.remote-error"


def test_stop_marks_do_not_depend_on_chunking():
    cat = load_catalog(include_user=False)
    path = next(RUNS.glob("oom_cgroup_kill/logs/*/attempt_0/2/stdout.log"))
    data = path.read_bytes()

    def marks(parts):
        p = SourceProcessor(SourceInfo(path=str(path), kind="rank-file", file_rank=2), Matcher(cat))
        off = 0
        for part in parts:
            p.feed(part, off)
            off += len(part)
        return {k: (m.step, m.total, m.line, m.offset) for k, m in p.stop_marks.items()}

    lines = data.splitlines(keepends=True)
    assert marks([data]) == marks(lines) == {(0, ("g", 2)): (20, 400, 5, data.index(b"2026-12-01 09:38:42,522"))}
