"""paths_from_logs / scan_logs on real lines (shared/corpus, failure-messages.md samples, public
logs) and on the corpus trees themselves."""

from __future__ import annotations

import os
import sys

import pytest

from denpex_tui.probes.logpaths import (
    LogFollower,
    LogScan,
    iter_candidate_lines,
    paths_from_logs,
    scan_line,
    scan_logs,
)

CORPUS = "/work/shared/corpus"
needs_corpus = pytest.mark.skipif(not os.path.isdir(CORPUS), reason="shared corpus not present")


def one(line: str, log: str = "/nonexistent-logdir/console.log") -> LogScan:
    s = LogScan()
    scan_line(line, log, 1, s)
    return s


def wanted(line: str, log: str = "/nonexistent-logdir/console.log") -> list[tuple[str, str]]:
    return [(w.wanted, w.why) for w in one(line, log).watch]


# (line, source, expected named directories)
ABSOLUTE = [
    ("OSError: [Errno 28] No space left on device: "
     "'/ckpt/global_step100/mp_rank_00_model_states.pt'",
     "failure-messages.md C1", ["/ckpt/global_step100"]),
    ("OSError: [Errno 24] Too many open files: "
     "'/ckpt/global_step700/zero_pp_rank_0_mp_rank_00_optim_states.pt'",
     "failure-messages.md C2", ["/ckpt/global_step700"]),
    ("deepspeed_aio:   open for write  failed on "
     "/local_nvme/zero_stage_3/optimizer/rank3/41.tensor.swp error = 28",
     "failure-messages.md A1", ["/local_nvme/zero_stage_3/optimizer/rank3", "/local_nvme"]),
    ("/local_nvme/zero_stage_3/optimizer/rank3/41.tensor.swp: file_offset + buffer nbytes > "
     "file bytes 4194304 > 1048576", "failure-messages.md A3",
     ["/local_nvme/zero_stage_3/optimizer/rank3"]),
    ("[2023-05-04 01:24:08,415] [INFO] [utils.py:34:print_object]   swap_folder "
     ".................. /nvme/zero_stage_3/float16params/rank0",
     "failure-messages.md A8 (DeepSpeed#3376)", ["/nvme/zero_stage_3/float16params/rank0"]),
    ("[2023-05-04 01:24:08,415] [INFO] [utils.py:34:print_object]   swap_config "
     ".................. device='nvme' nvme_path=PosixPath('/nvme') buffer_count=5 "
     "buffer_size=100,000,000 max_in_cpu=1,000,000,000 pin_memory=True",
     "failure-messages.md A8 (DeepSpeed#3376)", ["/nvme"]),
    ('      "nvme_path": "/local_nvme",', "DeepSpeed JSON config echo (public config)",
     ["/local_nvme"]),
    ("Copying NVMe offload files from /local_nvme/zero_stage_3/optimizer/rank0 to "
     "/ckpt/global_step100/offloaded_tensors/rank00, 812.40 GB free on target filesystem...",
     "failure-messages.md A10",
     ["/local_nvme/zero_stage_3/optimizer/rank0", "/ckpt/global_step100/offloaded_tensors/rank00"]),
    ("[2026-01-01 10:00:00.123456] saving checkpoint at iteration     100 to /ckpt in "
     "torch_dist format", "failure-messages.md H1", ["/ckpt"]),
    ("Epoch 3, global step 1200: 'val_loss' reached 0.41230 (best 0.41230), saving model to "
     "'/ckpt/epoch=3-step=1200.ckpt' as top 1", "failure-messages.md H11", ["/ckpt"]),
    ("  error_file: /tmp/torchelastic_aeyvjbpe/none_8zuih7tj/attempt_0/0/error.json",
     "failure-messages.md F9 (pytorch#65041)", ["/tmp/torchelastic_aeyvjbpe/none_8zuih7tj"]),
    ("INFO:torch.distributed.elastic.agent.server.local_elastic_agent:log directory set to: "
     "/tmp/torchelastic_2zzg5_sz/none_mjqneoph", "public torchrun log",
     ["/tmp/torchelastic_2zzg5_sz/none_mjqneoph"]),
    ("zero checkpoint saved /ckpt/global_step100/zero_pp_rank_3_mp_rank_00_optim_states.pt",
     "failure-messages.md B6", ["/ckpt"]),
]


@pytest.mark.parametrize("line,source,expect", ABSOLUTE, ids=[a[1] for a in ABSOLUTE])
def test_absolute_paths(line, source, expect):
    got = [w for w, _why in wanted(line)]
    assert got == expect, source


RELATIVE = [
    ("[2024-04-09 15:39:37,942] [INFO] [logging.py:96:log_dist] [Rank 0] Saving model "
     "checkpoint: ./training/model/temp/test-step00000001-state/pytorch_model/"
     "mp_rank_00_model_states.pt", "failure-messages.md B3 (kohya-ss/sd-scripts#1247)",
     "training/model/temp/test-step00000001-state"),
    ("[INFO|trainer.py:2753] 2023-02-06 16:37:12,461 >> Saving model checkpoint to "
     "bennyD/checkpoint-500", "failure-messages.md H6 (transformers#21482)", "bennyD"),
    ("01/02/2024 00:20:14 - INFO - accelerate.accelerator - Saving current state to "
     "path/to/saved/model/checkpoint-490", "failure-messages.md H7 (NVIDIA/nccl#1132)",
     "path/to/saved/model"),
    ("[default0]:[2026-11-29 17:51:13,206] [INFO] [logging.py:123:log_dist] [Rank 0] Saving "
     "model checkpoint: checkpoints/global_step60/mp_rank_00_model_states.pt",
     "corpus/deepspeed_enospc_checkpoint/node0/console.log", "checkpoints"),
]


@pytest.mark.parametrize("line,source,rel", RELATIVE, ids=[r[1] for r in RELATIVE])
def test_relative_paths_resolve_against_the_log(tmp_path, line, source, rel):
    log = tmp_path / "run" / "console.log"
    log.parent.mkdir()
    # not present: named relative to the log's directory, watched at its nearest ancestor
    [w] = one(line, str(log)).watch
    assert w.wanted == str(tmp_path / "run" / rel)
    assert w.exists is False and w.path == str(tmp_path / "run")
    # present: watched itself
    (tmp_path / "run" / rel).mkdir(parents=True)
    [w] = one(line, str(log)).watch
    assert w.exists is True and w.path == str(tmp_path / "run" / rel)


def test_shared_memory_names_mean_dev_shm():
    for line in [
        "RuntimeError: unable to write to file </torch_9931_3149260800_0>: No space left on "
        "device (28)",  # failure-messages.md C9
        "[default0]:[rank0]: RuntimeError: unable to allocate shared memory(shm) for file "
        "</torch_7504_611462219_0>: No space left on device (28)",  # corpus/shm_enospc_dataloader
    ]:
        s = one(line)
        assert [w.wanted for w in s.watch] == ["/dev/shm"]
        [e] = s.errors
        assert e.errno == 28 and e.signature_id == "os.shm-enospc" and e.path.startswith("</torch_")


def test_errors_carry_signature_and_path():
    s = one("OSError: [Errno 122] Disk quota exceeded: 'out/intermediate.ntw'",  # C3
            "/nonexistent-logdir/x.log")
    [e] = s.errors
    assert (e.errno, e.signature_id) == (122, "os.edquot")
    assert e.path == "/nonexistent-logdir/out/intermediate.ntw"
    s = one("[default3]:OSError: [Errno 24] Too many open files: '/scratch/denpex-jobs/run05'")
    [e] = s.errors  # corpus/fd_leak_emfile: a directory, kept as is
    assert (e.errno, e.signature_id, e.path) == (24, "os.emfile", "/scratch/denpex-jobs/run05")
    assert [w.wanted for w in s.watch] == ["/scratch/denpex-jobs/run05"]


def test_lines_that_name_nothing():
    for line in [
        # corpus zero_config echo with offload off (real line, truncated by nothing)
        "[2026-11-29 17:50:44,405] [INFO] [config.py:678:print]   zero_config "
        ".................. stage=2 contiguous_gradients=True offload_param=None "
        "offload_optimizer=None zenflow=None",
        "  error_file: <N/A>",  # corpus fd_leak_emfile (rank 3 could not write it)
        "[default3]:2026-11-29 17:40:16,721 INFO [rank3/4] train: Saving checkpoint step 75",
        "RuntimeError: [enforce fail at inline_container.cc:858] . PytorchStreamWriter failed "
        "writing file data/37: file write failed",
    ]:
        assert one(line).watch == [], line


def test_save_events_and_ranks():
    s = one("[default3]:2026-11-29 17:43:58,206 INFO [rank3/4] train: Saving checkpoint step 90")
    [ev] = s.saves
    assert (ev.rank, ev.local_rank) == (3, None)
    s = one("[default0]:[2026-11-29 17:51:13,206] [INFO] [logging.py:123:log_dist] [Rank 0] "
            "Saving model checkpoint: checkpoints/global_step60/mp_rank_00_model_states.pt")
    [ev] = s.saves  # log_dist on rank 0 announces a save that every rank makes
    assert (ev.rank, ev.local_rank) == (None, None)
    s = one("[default2]:[2026-11-29 17:51:13,186] [INFO] [logging.py:123:log_dist] [Torch] "
            "Checkpoint global_step60 is about to be saved!")
    assert [(e.rank, e.local_rank) for e in s.saves] == [(None, 2)]


@needs_corpus
def test_corpus_trees():
    ds = os.path.join(CORPUS, "deepspeed_enospc_checkpoint")
    w = paths_from_logs([ds])
    named = {x.wanted for x in w}
    # the checkpoint dir is named relative to each node's cwd, including from the per-rank
    # stdout.log four levels down the torchrun log dir
    assert os.path.join(ds, "node0", "checkpoints") in named
    assert os.path.join(ds, "node0", "logs", "none_kpqx8ij9", "attempt_0", "0",
                        "checkpoints") not in named
    assert os.path.join(ds, "node2", "logs", "none_f9e8pzg2") in {x.path for x in w}
    assert len({x.path for x in w}) == len(w)  # deduplicated

    fd = scan_logs([os.path.join(CORPUS, "fd_leak_emfile", "console.log")])
    assert {e.signature_id for e in fd.errors} == {"os.emfile"}
    saves3 = [e for e in fd.saves if e.rank == 3]
    assert len(saves3) == 9  # steps 10..90

    shm = scan_logs([os.path.join(CORPUS, "shm_enospc_dataloader")])
    assert "/dev/shm" in {x.path for x in shm.watch}
    assert {e.signature_id for e in shm.errors} == {"os.shm-enospc"}


def test_binary_files_are_skipped(tmp_path):
    # a real binary (an executable's first page) that happens to hold the text: not a log
    with open(sys.executable, "rb") as fh:
        head = fh.read(4096)
    (tmp_path / "core.bin").write_bytes(head + b"Saving model checkpoint: /ckpt/a/b.pt\n")
    (tmp_path / "ok.log").write_text("[Rank 0] Saving model checkpoint: /ckpt/a/b.pt\n")
    s = scan_logs([str(tmp_path)])
    assert s.files_read == 1
    assert s.files_skipped == [(str(tmp_path / "core.bin"), "binary file, not a log: skipped")]
    assert [w.wanted for w in s.watch] == ["/ckpt"]


def test_bounded_memory_on_huge_line_and_line_numbers(tmp_path):
    f = tmp_path / "big.log"
    with open(f, "wb") as fh:
        fh.write(b"first line\n")
        fh.write(b"x" * (3 << 20))  # a 3 MiB line with no newline until here
        fh.write(b" Saving model checkpoint: /lost/a/b.pt\n")
        fh.write(b"ok\n" * 1000)
        fh.write(b"OSError: [Errno 28] No space left on device: '/ckpt/s/f.pt'\n")
    got = list(iter_candidate_lines(str(f)))
    assert len(got) == 1
    no, text = got[0]
    assert no == 1003 and text.startswith("OSError: [Errno 28]")
    assert all(len(t) <= 64 * 1024 for _n, t in got)


def test_control_characters_are_escaped_in_source_lines():
    s = one("\x1b[31mOSError: [Errno 28] No space left on device: '/ckpt/x/y.pt'\x1b[0m")
    assert "\x1b" not in s.watch[0].source_line and "\\x1b" in s.watch[0].source_line


def test_follower_sees_only_new_save_lines(tmp_path):
    log = tmp_path / "console.log"
    log.write_text("[default1]:2026-11-29 17:40:15,518 INFO [rank1/4] train: Saving checkpoint "
                   "step 25\n")
    fol = LogFollower([str(log)])
    assert fol.poll() == []  # starts at the end
    with open(log, "a") as fh:
        fh.write("[default1]:2026-11-29 17:40:16,110 INFO [rank1/4] train: Saving checkpoint "
                 "step 50\npartial line without newline: Saving checkpoint")
    [ev] = fol.poll()
    assert ev.rank == 1
    assert fol.poll() == []
    with open(log, "a") as fh:
        fh.write(" step 75 [rank2]\n")
    [ev] = fol.poll()
    assert ev.rank == 2
    log.write_text("[rank0]: Saving checkpoint step 1\n")  # truncated / rewritten
    [ev] = fol.poll()
    assert ev.rank == 0


def test_follower_reports_new_watch_paths_with_line_numbers(tmp_path):
    log = tmp_path / "console.log"
    log.write_text("line 1\n")
    fol = LogFollower([str(log)])
    with open(log, "a") as fh:
        fh.write("line 2\n[2026-01-01 10:00:00.123456] saving checkpoint at iteration     100 "
                 "to /ckpt in torch_dist format\n")
    s = fol.poll_all()
    assert [w.wanted for w in s.watch] == ["/ckpt"]
    assert s.watch[0].line_no == 2  # counted from where following started
    assert len(s.saves) == 1
