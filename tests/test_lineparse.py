"""Prefixes, ranks and timestamps, on real line shapes from the corpus and the reference."""

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from denpex_tui.core.lines.facts import parse_level, parse_line as parse_prefix
from denpex_tui.core.lines.times import line_time


def parse_time(text, year_hint=None):
    st = line_time(text, year_hint)
    return (st.dt, st.written) if st else (None, None)


def test_torchrun_tee_and_rank_prefixes():
    p = parse_prefix("[default2]:[rank2]: RuntimeError: basic_ios::clear: iostream error")
    assert (p.local_rank, p.rank, p.text) == (2, 2, "RuntimeError: basic_ios::clear: iostream error")
    p = parse_prefix("[default0]:2026-11-29 17:40:16,720 INFO [rank0/4] train: Saving checkpoint step 75")
    assert p.local_rank == 0 and p.rank == 0  # the trainer's own "[rank0/4]" (rank of world size)


def test_deepspeed_rank_srun_and_pdsh():
    p = parse_prefix("[2024-04-09 15:39:37,942] [INFO] [logging.py:96:log_dist] [Rank 0] Saving model checkpoint: x")
    assert p.rank == 0
    assert parse_prefix("[2025-03-25 18:12:45,948] [INFO] [logging.py:96:log_dist] [Rank -1] DeepSpeed info: version=0.14.0").rank is None
    p = parse_prefix("  5: [rank5]: Traceback (most recent call last):")
    assert p.task == 5 and p.rank == 5
    p = parse_prefix("node-3: [2024-01-01 10:00:00,000] [INFO] [launch.py:80:main] WORLD INFO DICT")
    assert p.host == "node-3"
    p = parse_prefix("RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 1 vs 2")
    assert p.host is None and p.text.startswith("RuntimeError")


def test_timestamps():
    t, _ = parse_time("2026-11-29 17:40:16,343 INFO [rank0/4] train: step 60/200")
    assert t == datetime(2026, 11, 29, 17, 40, 16, 343000)
    t, _ = parse_time("[2026-11-29 17:51:02,788] [INFO] [comm.py:877:init_distributed] cdb=None")
    assert t == datetime(2026, 11, 29, 17, 51, 2, 788000)
    t, _ = parse_time("W1129 17:40:18.570000 30537 torch/distributed/elastic/multiprocessing/api.py:1028] Sending", 2026)
    assert t == datetime(2026, 11, 29, 17, 40, 18, 570000)
    t, _ = parse_time("[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught", 2024)
    assert t == datetime(2024, 12, 18, 20, 27, 21, 426415)
    t, _ = parse_time("2026-11-29T17:40:16.343+02:00 worker up")
    assert t.utcoffset() == timedelta(hours=2)
    t, _ = parse_time("01/02/2024 00:20:14 - INFO - accelerate.accelerator - Saving current state to x")
    assert t == datetime(2024, 1, 2, 0, 20, 14)
    assert parse_time("  File \"/x.py\", line 3, in f")[0] is None


def test_levels():
    assert parse_level("[2026-11-29 17:51:09,454] [WARNING] [lr_schedules.py:759:get_lr] x") == "warning"
    assert parse_level("E1129 17:40:18.662000 30537 torch/x.py:1002] failed") == "error"
    assert parse_level("2026-11-29 17:40:17,345 ERROR [rank2/4] train: Checkpoint save failed") == "error"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_parsers_never_raise(text):
    p = parse_prefix(text)
    assert p.text in text
    parse_time(text, 2026)
    parse_level(text)


def test_a_logging_formats_rank_tag_names_the_rank():
    """A DeepSpeed launcher's console has no rank prefix: the trainer's own format ('[rank1/2]',
    '[rank1]') is the only thing that names the rank of a clean run's lines (issue 20: a
    two-rank clean control was read as one rank)."""
    assert parse_prefix("2026-12-01 21:29:53,247 INFO [rank1/2] ds_train: step 10/60 loss 2.7625").rank == 1
    assert parse_prefix("2026-11-29 17:50:37,616 INFO [rank3] compilers.C.base: gcc -c /tmp/tmpwanbvryk/t.c").rank == 3
    assert parse_prefix("[2024-04-09 15:39:37,942] [INFO] [logging.py:96:log_dist] [Rank 0] Saving").rank == 0
    assert parse_prefix("loss went up at step 3/4 [ranking metric] 0.3").rank is None
