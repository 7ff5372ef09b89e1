"""`denpex checkpoints` on real checkpoint folders (tests/fixtures/checkpoints/README.md says how
each was made) and on damaged copies of them."""

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import ROOT

from denpex_tui.core.checkpoints import CheckpointError, inspect_checkpoints

FIX = ROOT / "tests" / "fixtures" / "checkpoints"
KINDS = {"deepspeed": ("deepspeed", "global_step3"), "hf_trainer": ("hf-trainer", "checkpoint-6"),
         "megatron": ("megatron", "iter_0000030"), "torch_dcp": ("torch-dcp", "step_3"),
         "lightning": ("lightning", "epoch=0-step=6.ckpt"),
         "lightning_deepspeed": ("lightning", "epoch=0-step=4.ckpt")}


def _copy(tmp_path, name):
    dst = tmp_path / name
    shutil.copytree(FIX / name, dst)
    return dst


def _tag(rep, tag):
    return next(t for t in rep.tags if t.tag == tag)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_real_folders_are_complete(name):
    rep = inspect_checkpoints(str(FIX / name))
    kind, newest = KINDS[name]
    assert rep.kind == kind
    assert [t.tag for t in rep.tags if not t.complete] == []
    assert rep.resume_from == newest and rep.warnings == []


def test_newest_tag_lacks_one_ranks_optimizer_shard(tmp_path):
    d = _copy(tmp_path, "deepspeed")
    os.unlink(d / "global_step3" / "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    rep = inspect_checkpoints(str(d))
    t = _tag(rep, "global_step3")
    assert not t.complete and t.missing == ["zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    assert rep.resume_from == "global_step2"
    assert any("latest points at global_step3, which is INCOMPLETE" in w for w in rep.warnings)


def test_empty_and_truncated_shards(tmp_path):
    d = _copy(tmp_path, "deepspeed")
    (d / "global_step2" / "mp_rank_00_model_states.pt").write_bytes(b"")
    p = d / "global_step3" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    p.write_bytes(p.read_bytes()[:2000])  # a write cut short (the zip directory is at the end)
    rep = inspect_checkpoints(str(d))
    assert any("empty file" in x for x in _tag(rep, "global_step2").problems)
    assert any("truncated" in x for x in _tag(rep, "global_step3").problems)
    assert rep.resume_from == "global_step1"


def test_stale_latest_means_the_newer_save_never_committed(tmp_path):
    d = _copy(tmp_path, "deepspeed")
    (d / "latest").write_text("global_step2")
    rep = inspect_checkpoints(str(d))
    assert any("never committed" in x for x in _tag(rep, "global_step3").problems)
    assert rep.resume_from == "global_step2" and rep.warnings == []


def test_latest_names_a_missing_tag(tmp_path):
    d = _copy(tmp_path, "deepspeed")
    shutil.rmtree(d / "global_step3")
    rep = inspect_checkpoints(str(d))
    assert rep.resume_from == "global_step2"
    assert any("not a tag in this folder" in w for w in rep.warnings)


def test_hf_trainer_without_trainer_state_or_one_ranks_rng(tmp_path):
    d = _copy(tmp_path, "hf_trainer")
    os.unlink(d / "checkpoint-6" / "trainer_state.json")
    os.unlink(d / "checkpoint-4" / "rng_state_1.pth")
    (d / "tmp-checkpoint-8").mkdir()
    (d / "tmp-checkpoint-8" / "model.safetensors").write_bytes(b"")
    rep = inspect_checkpoints(str(d))
    assert any("trainer_state.json" in m for m in _tag(rep, "checkpoint-6").missing)
    assert _tag(rep, "checkpoint-4").missing == ["rng_state_1.pth"]
    assert "staging folder" in _tag(rep, "tmp-checkpoint-8").problems[0]
    assert rep.resume_from == "checkpoint-2"
    assert any("newest tag" in w and "INCOMPLETE" in w for w in rep.warnings)


def test_hf_truncated_safetensors(tmp_path):
    d = _copy(tmp_path, "hf_trainer")
    p = d / "checkpoint-6" / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-100])
    rep = inspect_checkpoints(str(d))
    assert any("model.safetensors: truncated" in x for x in _tag(rep, "checkpoint-6").problems)


def test_dcp_without_metadata_and_with_leftover_tmp(tmp_path):
    d = _copy(tmp_path, "torch_dcp")
    os.rename(d / "step_3" / ".metadata", d / "step_3" / ".metadata.tmp")  # finish() never renamed it
    os.unlink(d / "step_2" / "__1_0.distcp")
    rep = inspect_checkpoints(str(d))
    t3 = _tag(rep, "step_3")
    assert any(".metadata" in m for m in t3.missing)
    assert any(".metadata.tmp" in p and "temporary" in p for p in t3.problems)
    assert _tag(rep, "step_2").missing == ["__1_*.distcp (rank 1)"]
    assert rep.resume_from == "step_1"


def test_megatron_missing_distributed_optimizer_of_one_tp_rank(tmp_path):
    d = _copy(tmp_path, "megatron")
    os.unlink(d / "iter_0000030" / "mp_rank_01" / "distrib_optim.pt")
    rep = inspect_checkpoints(str(d))
    assert _tag(rep, "iter_0000030").missing == ["mp_rank_01/distrib_optim.pt"]
    assert rep.resume_from == "iter_0000020"
    assert any("latest_checkpointed_iteration.txt points at iter_0000030" in w for w in rep.warnings)


def test_lightning_truncated_file_and_deepspeed_folder_without_a_rank(tmp_path):
    d = _copy(tmp_path, "lightning")
    p = d / "epoch=0-step=6.ckpt"
    p.write_bytes(p.read_bytes()[:3000])
    rep = inspect_checkpoints(str(d))
    assert not _tag(rep, "epoch=0-step=6.ckpt").complete and rep.resume_from == "epoch=0-step=4.ckpt"
    d2 = _copy(tmp_path, "lightning_deepspeed")
    os.unlink(d2 / "epoch=0-step=4.ckpt" / "checkpoint" / "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    rep2 = inspect_checkpoints(str(d2))
    assert _tag(rep2, "epoch=0-step=4.ckpt").missing == ["checkpoint/zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    assert rep2.resume_from == "epoch=0-step=2.ckpt"


def test_a_single_tag_given_as_dir(tmp_path):
    d = _copy(tmp_path, "deepspeed")
    rep = inspect_checkpoints(str(d / "global_step2"))
    assert [t.tag for t in rep.tags] == ["global_step1", "global_step2", "global_step3"]


def _digest(root):
    h = hashlib.sha256()
    for dp, _, fs in sorted(os.walk(root)):
        for f in sorted(fs):
            p = os.path.join(dp, f)
            st = os.stat(p)
            h.update(f"{p}{st.st_size}{st.st_mtime_ns}".encode())
            h.update(open(p, "rb").read())
    return h.hexdigest()


def test_read_only(tmp_path):
    d = _copy(tmp_path, "hf_trainer")
    before = _digest(d)
    inspect_checkpoints(str(d))
    assert _digest(d) == before


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "denpex_tui", "checkpoints", *args],
                          capture_output=True, text=True, timeout=60)


def test_cli_json_shape_and_exit_codes(tmp_path):
    d = _copy(tmp_path, "deepspeed")
    ok = _cli(str(d), "--json")
    assert ok.returncode == 0, ok.stderr
    os.unlink(d / "global_step3" / "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    r = _cli(str(d), "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert list(doc) == ["schema", "checkpoints", "resume_from"] and doc["schema"] == 1
    assert all(list(c) == ["tag", "path", "complete", "missing", "problems"] for c in doc["checkpoints"])
    assert doc["resume_from"] == "global_step2"
    assert "INCOMPLETE" in r.stderr  # said loudly, even in JSON mode
    text = _cli(str(d))
    assert "!! latest points at global_step3, which is INCOMPLETE" in text.stdout
    assert "resume from: global_step2" in text.stdout
    for bad in (str(tmp_path / "nope"), str(tmp_path)):
        b = _cli(bad)
        assert b.returncode == 2 and b.stderr.count("\n") == 1 and "Traceback" not in b.stderr


def test_not_a_directory_raises(tmp_path):
    with pytest.raises(CheckpointError):
        inspect_checkpoints(str(tmp_path / "missing"))


def test_hostile_names_never_reach_the_terminal(tmp_path):
    d = tmp_path / "ck\x1b]52;c;ZXZpbA==\x07"
    shutil.copytree(FIX / "deepspeed", d)
    (d / "global_step3" / "zero_pp_rank_0_mp_rank_00_optim_states.pt.tmp\x1b[2J").write_bytes(b"x")
    (d / "latest").write_bytes(b"global_step3\x1b[31m")
    r = _cli(str(d))
    assert r.returncode == 1 and "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "temporary" in r.stdout and "not a tag in this folder" in r.stdout
    j = _cli(str(d), "--json")
    assert "\x1b" not in j.stdout and "\x1b" not in j.stderr
