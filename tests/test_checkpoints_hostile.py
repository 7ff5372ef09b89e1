"""`denpex checkpoints` on a hostile folder (issue 19, item 6): real FIFOs, absurd numbers in
shard names, safetensors headers that are no header. Every case is bounded in time and memory and
says one line per damaged thing, never an internal error or an unbounded list."""

import json
import os
import resource
import shutil
import struct
import subprocess
import sys

from helpers import ROOT

FIX = ROOT / "tests" / "fixtures" / "checkpoints"


def _copy(tmp_path, name):
    dst = tmp_path / name
    shutil.copytree(FIX / name, dst)
    return dst


def _run(d, timeout=60):
    """``denpex checkpoints --json DIR`` under a 1 GiB address-space limit (a list of 10^11
    entries, or a 1 GB list of names, cannot hide)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    r = subprocess.run([sys.executable, "-m", "denpex_tui", "checkpoints", "--json", str(d)], capture_output=True,
                       text=True, timeout=timeout, preexec_fn=limit)
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.returncode in (0, 1), (r.returncode, r.stderr)
    doc = json.loads(r.stdout)
    for t in doc["checkpoints"]:
        assert len(t["missing"]) <= 51 and len(t["problems"]) <= 51
    assert len(r.stdout) < 200_000
    return doc, r


def _tag(doc, tag):
    return next(t for t in doc["checkpoints"] if t["tag"] == tag)


def test_a_fifo_named_latest_never_blocks(tmp_path):
    d = _copy(tmp_path, "deepspeed")
    os.unlink(d / "latest")
    os.mkfifo(d / "latest")
    doc, r = _run(d)
    assert "latest is not a regular file" in r.stderr
    assert doc["resume_from"] == "global_step3"


def test_a_fifo_named_trainer_state_json_or_a_shard_never_blocks(tmp_path):
    d = _copy(tmp_path, "hf_trainer")
    os.unlink(d / "checkpoint-6" / "trainer_state.json")
    os.mkfifo(d / "checkpoint-6" / "trainer_state.json")
    os.unlink(d / "checkpoint-4" / "model.safetensors")
    os.mkfifo(d / "checkpoint-4" / "model.safetensors")
    doc, _ = _run(d)
    assert any("trainer_state.json: not a regular file" in p for p in _tag(doc, "checkpoint-6")["problems"])
    assert any("model.safetensors: not a regular file" in p for p in _tag(doc, "checkpoint-4")["problems"])
    assert doc["resume_from"] == "checkpoint-2"


def test_an_absurd_rank_in_a_shard_name_is_one_problem(tmp_path):
    d = _copy(tmp_path, "deepspeed")
    src = d / "global_step2" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    shutil.copy(src, d / "global_step2" / "zero_pp_rank_99999999999_mp_rank_00_optim_states.pt")
    shutil.copy(src, d / "global_step2" / f"zero_pp_rank_{'9' * 200}_mp_rank_00_optim_states.pt")
    doc, _ = _run(d)
    probs = _tag(doc, "global_step2")["problems"]
    assert sum("rank number over 100,000" in p for p in probs) == 2
    assert _tag(doc, "global_step3")["missing"] == []  # the real ranks are still what is expected


def test_a_shard_count_of_99999999999_is_one_problem(tmp_path):
    d = _copy(tmp_path, "hf_trainer")
    tag = d / "checkpoint-6"
    os.rename(tag / "model.safetensors", tag / "model-00001-of-99999999999.safetensors")
    doc, _ = _run(d)
    probs = _tag(doc, "checkpoint-6")["problems"]
    assert any("a shard count over 100,000" in p for p in probs)


def test_many_missing_shards_are_counted_not_listed(tmp_path):
    d = _copy(tmp_path, "hf_trainer")
    tag = d / "checkpoint-6"
    os.rename(tag / "model.safetensors", tag / "model-00001-of-90000.safetensors")
    doc, _ = _run(d)
    missing = _tag(doc, "checkpoint-6")["missing"]
    assert len(missing) == 51 and missing[-1] == "... and 89,949 more"


def _safetensors(path, header: bytes):
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 64)


def test_a_safetensors_header_that_is_a_list_or_nested_without_end_is_a_damaged_header(tmp_path):
    d = _copy(tmp_path, "hf_trainer")
    _safetensors(d / "checkpoint-6" / "model.safetensors", b"[1, 2, 3]")
    _safetensors(d / "checkpoint-4" / "model.safetensors", b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    _safetensors(d / "checkpoint-2" / "model.safetensors", b'{"w": {"data_offsets": "xy"}}')
    doc, _ = _run(d)
    for tag in ("checkpoint-2", "checkpoint-4", "checkpoint-6"):
        assert "model.safetensors: damaged header" in _tag(doc, tag)["problems"], tag


def test_a_megatron_tracker_holding_a_superscript_digit(tmp_path):
    d = _copy(tmp_path, "megatron")
    for text in ("²", "9" * 5000, "٣"):
        (d / "latest_checkpointed_iteration.txt").write_text(text)
        doc, r = _run(d)
        assert "latest_checkpointed_iteration.txt names" in r.stderr and "which is not a tag" in r.stderr
        assert doc["resume_from"] == "iter_0000030"


def test_a_tag_with_a_240_digit_step(tmp_path):
    d = _copy(tmp_path, "deepspeed")
    shutil.copytree(d / "global_step1", d / f"global_step{'7' * 240}")
    doc, _ = _run(d)
    assert doc["resume_from"] == "global_step3"
