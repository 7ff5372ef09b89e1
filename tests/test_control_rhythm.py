"""scan --control (known-good control) and the failure's rhythm, on the real corpus runs."""

import json
import subprocess
import sys

import pytest
from helpers import CORPUS

from denpex_tui.core.control import compare_with_control, normalise
from denpex_tui.core.rhythm import checkpoint_related, combine, rhythm_of
from denpex_tui.core.scan import scan_paths


@pytest.fixture(scope="module")
def runs():
    names = ["clean_run", "enospc_checkpoint_fastfail", "fd_leak_emfile", "stalled_rank_hang",
             "deepspeed_clean_run", "deepspeed_enospc_checkpoint", "shm_enospc_dataloader"]
    return {n: scan_paths([str(CORPUS / n)], jobs=1) for n in names}


def _cmp(runs, failing, control):
    return compare_with_control(runs[failing], runs[control], [str(CORPUS / failing)], [str(CORPUS / control)])


def test_normalise_real_lines_of_two_runs():
    a = "2026-11-29 17:39:22,413 INFO [rank0/4] train: step 10/200 | epoch 0 | loss 2.8038 | acc 0.039"
    b = "2026-11-29 17:43:52,101 INFO [rank0/4] train: step 20/200 | epoch 0 | loss 2.6037 | acc 0.203"
    assert normalise(a, []) == normalise(b, [])
    c = "[rank0]:   File \"/scratch/denpex-jobs/run03/train.py\", line 318, in main"
    assert "<run>" in normalise(c, ["/scratch/denpex-jobs/run03"])
    assert normalise("logs/3e633cef-a49a-48c8-901a-842fa0616907_lge4j_lc/attempt_0", []) == \
        normalise("logs/2c472a59-7ca4-495f-b3b3-78f590f62e85_hnhsucct/attempt_0", [])


def test_normalise_progress_bars_temp_names_and_logger_headers():
    """The 'first new line' was a tqdm bar redrawn with \\r, a compiler's temp file, or the
    same warning under another logger header (issue 20)."""
    stuck = ("\\x0dWriting model shards:   0%|          | 0/1 [00:00<?, ?it/s]"
             "\\x0dWriting model shards:   0%|          | 0/1 [00:00<?, ?it/s]")
    done = ("\\x0dWriting model shards:   0%|          | 0/1 [00:00<?, ?it/s]"
            "\\x0dWriting model shards: 100%|██████████| 1/1 [00:00<00:00, 169.69it/s]")
    assert normalise(stuck, []) == normalise(done, []) == "Writing model shards: <progress>"
    a = "2026-11-29 17:50:37,616 INFO [rank1] compilers.C.base: gcc -c /tmp/tmpwanbvryk/test.c -o /tmp/tmpwanbvryk/test.o"
    b = "2026-11-30 09:02:11,002 INFO [rank1] compilers.C.base: gcc -c /tmp/tmp_3k9x0qa/test.c -o /tmp/tmp_3k9x0qa/test.o"
    assert normalise(a, []) == normalise(b, [])
    assert normalise("cc1: note: /tmp/ccA1b2C3.s written", []) == normalise("cc1: note: /tmp/ccZ9y8X7.s written", [])
    w1 = "[WARNING|logging.py:340] 2026-12-01 09:48:21,166 >> `loss_type=None` was set in the config but it is unrecognized."
    w2 = "[transformers] `loss_type=None` was set in the config but it is unrecognized."
    assert normalise(w1, []) == normalise(w2, [])
    assert normalise("RuntimeError: basic_ios::clear: iostream error", []) != normalise("step 3/4", [])


def test_the_stalled_hf_rank_shows_what_it_waited_for():
    """With numbers, headers and progress bars normalised, rank 1's one new line is the read it
    blocked in (it was a transformers warning under another header)."""
    from helpers import ROOT

    runs_dir = ROOT / "tests" / "fixtures" / "runs"
    f, c = runs_dir / "hf_trainer_stalled_rank", runs_dir / "hf_clean_run"
    rep = compare_with_control(scan_paths([str(f)], jobs=1), scan_paths([str(c)], jobs=1), [str(f)], [str(c)])
    r1 = next(r for r in rep.ranks if r.rank == 1)
    assert r1.new_lines == 1 and r1.first_new.text == "rank 1: waiting for batch index from next_batch.fifo"


def test_a_deepspeed_console_control_is_read_with_its_two_ranks():
    """A DeepSpeed launcher's console has no rank prefix: the healthy 2-rank control was read as
    rank 0 only ('ranks differ: ... the control 0') and the killed rank 1 was never compared."""
    from helpers import ROOT

    runs_dir = ROOT / "tests" / "fixtures" / "runs"
    f, c = runs_dir / "deepspeed_each_rank_log_kill9", runs_dir / "deepspeed_console_clean"
    ctl = scan_paths([str(c)], jobs=1)
    assert sorted({r for s in ctl.job.sources() for r in s.ranks}) == [0, 1]
    rep = compare_with_control(scan_paths([str(f)], jobs=1), ctl, [str(f)], [str(c)])
    assert not rep.shape, rep.shape
    assert [r.rank for r in rep.ranks] == [0, 1]
    r0 = rep.ranks[0]  # rank 0's first new line is its own traceback, not DeepSpeed's start-up noise
    assert r0.first_new.text.startswith("[rank0]: Traceback")


def test_fd_leak_first_new_line_is_the_lowered_fd_limit(runs):
    rep = _cmp(runs, "fd_leak_emfile", "clean_run")
    assert rep.shape == [] and [r.rank for r in rep.ranks] == [0, 1, 2, 3]
    for r in rep.ranks:
        assert r.first_new.line == 1 and "RLIMIT_NOFILE lowered from 20000 to 256" in r.first_new.text
        assert r.error is not None and r.new_before_error is not None
        assert r.new_before_error.path.endswith("stdout.log")


def test_enospc_nothing_before_the_error_differs(runs):
    rep = _cmp(runs, "enospc_checkpoint_fastfail", "clean_run")
    r2 = next(r for r in rep.ranks if r.rank == 2)
    assert "Checkpoint save failed for step 100" in r2.first_new.text  # the failing rank's own ERROR line
    assert r2.new_before_error is None  # a full disk gives no warning in the lines before
    r0 = next(r for r in rep.ranks if r.rank == 0)
    assert "Traceback" in r0.first_new.text


def test_the_stalled_rank_printed_nothing_new(runs):
    rep = _cmp(runs, "stalled_rank_hang", "clean_run")
    r3 = next(r for r in rep.ranks if r.rank == 3)
    assert r3.new_lines == 0 and r3.first_new is None


def test_deepspeed_pair_matches_ranks_through_node_and_local_rank(runs):
    rep = _cmp(runs, "deepspeed_enospc_checkpoint", "deepspeed_clean_run")
    assert rep.shape == [] and [r.rank for r in rep.ranks] == [0, 1, 2, 3]
    for r in rep.ranks:
        assert r.new_lines < 0.6 * r.lines
        assert "Traceback" in r.first_new.text and r.first_new.path.endswith("stderr.log")


def test_job_shapes_that_differ_are_said(runs):
    rep = _cmp(runs, "enospc_checkpoint_fastfail", "shm_enospc_dataloader")
    assert any("ranks differ" in s for s in rep.shape)
    other = _cmp(runs, "deepspeed_enospc_checkpoint", "clean_run")
    assert any("may not be a run of the same job" in s for s in other.shape)


def test_rhythm_per_rank(runs):
    (fd,) = rhythm_of(runs["fd_leak_emfile"], "fd")
    assert fd.initiating_rank == 3 and fd.failed_after == 8 and fd.in_save[3] is True
    assert fd.saves == {0: 9, 1: 9, 2: 9, 3: 8}
    (en,) = rhythm_of(runs["enospc_checkpoint_fastfail"], "en")
    assert en.failed_after == 3 and en.saves[0] == 4
    (ds,) = rhythm_of(runs["deepspeed_enospc_checkpoint"], "ds")
    assert ds.initiating_rank == 2 and ds.failed_after == 2
    assert combine([[fd], [en]]).consistent is False and combine([[fd]]).consistent is None
    assert not checkpoint_related(runs["clean_run"]) and not runs["clean_run"].incidents


def _scan(*args):
    return subprocess.run([sys.executable, "-m", "denpex_tui", "scan", "--no-measure", *args],
                          capture_output=True, text=True, timeout=120)


def test_scan_cli_control_and_rhythm():
    r = _scan("--json", str(CORPUS / "fd_leak_emfile"), "--control", str(CORPUS / "clean_run"))
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1 and doc["incidents"] and doc["control"]["same_shape"] is True
    assert doc["rhythm"]["runs"][0]["failed_after_saves"] == 8
    t = _scan(str(CORPUS / "fd_leak_emfile"), "--runs", str(CORPUS / "enospc_checkpoint_fastfail"))
    assert "rank 3 failed after 8 saves (inside save 9)" in t.stdout
    assert "not the same number of saves" in t.stdout
    clean = _scan("--json", str(CORPUS / "clean_run"))
    assert "rhythm" not in json.loads(clean.stdout) and "control" not in json.loads(clean.stdout)


def test_control_on_the_real_nvme_enospc_pair():
    fix = CORPUS.parent / "footprint"
    a, b = scan_paths([str(fix / "zero3_nvme_enospc")], jobs=1), scan_paths([str(fix / "zero3_nvme_run")], jobs=1)
    rep = compare_with_control(a, b, [str(fix / "zero3_nvme_enospc")], [str(fix / "zero3_nvme_run")])
    assert rep.shape == []
    r1 = next(r for r in rep.ranks if r.rank == 1)
    assert "file_offset + buffer nbytes > file bytes 4194304 > 0" in r1.first_new.text
    assert r1.new_before_error is None  # the write that hit ENOSPC printed nothing
