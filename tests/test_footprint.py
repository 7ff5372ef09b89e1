"""`denpex footprint`: the README's hand calculation, and the comparison with a real filesystem."""

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT

from denpex_tui.core.footprint import FootprintError, compute, judge, load_config, parse_count

CFG = ROOT / "tests" / "fixtures" / "footprint" / "zero3_nvme.json"


def test_the_readme_hand_calculation():
    # README "denpex footprint": 7e9 parameters, 64 ranks, 8 nodes, bf16, AdamW, both offloads on NVMe.
    fp = compute(load_config(str(CFG)), parse_count("7e9"), 64, 8)
    pr = 109_375_000  # ceil(7e9 / 64)
    assert fp.per_rank["optimizer_state_bytes"] == pr * 4 * 3 == 1_312_500_000
    assert fp.per_rank["gradient_bytes"] == pr * 4 == 437_500_000
    assert fp.per_rank["param_bytes"] == pr * 2 == 218_750_000
    assert fp.per_rank["nvme_bytes"] == 1_968_750_000
    assert fp.per_node["nvme_bytes"] == 15_750_000_000
    assert fp.checkpoint_copy == {"per_rank": 1_312_500_000, "per_node": 10_500_000_000, "job": 84_000_000_000}
    # buffers rounded up to 1024 B x intra_op_parallelism: 512 bf16 / 256 fp32 elements
    assert fp.pinned_host_per_rank == {"param_buffers": 5 * 100_000_256 * 2, "optimizer_buffers": 4 * 109_375_232 * 4}
    assert any("share /local_nvme" in w for w in fp.warnings)
    readme = (ROOT / "README.md").read_text()
    for n in ("1,312,500,000", "437,500,000", "218,750,000", "1,968,750,000", "15,750,000,000", "84,000,000,000"):
        assert n in readme


def test_counts_and_bad_input():
    assert parse_count("7B") == 7_000_000_000 and parse_count("125M") == 125_000_000 and parse_count("7e9") == 7e9
    for bad in ("seven", "-1", "0", "nan"):
        with pytest.raises(FootprintError):
            parse_count(bad)
    with pytest.raises(FootprintError):
        compute({"zero_optimization": {"stage": 3}}, 10**9, 8)  # nothing on NVMe
    with pytest.raises(FootprintError):
        compute({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}}, 10**9, 8)


def test_separate_paths_and_stage_warning():
    cfg = load_config(str(CFG))
    cfg["zero_optimization"]["offload_param"]["nvme_path"] = "/other_nvme"
    cfg["zero_optimization"]["stage"] = 2
    fp = compute(cfg, 10**9, 8, 1)
    assert {e["path"]: e["per_rank_bytes"] for e in fp.nvme_paths} == {
        "/local_nvme": 125_000_000 * 16, "/other_nvme": 125_000_000 * 2}
    assert any("stage 3" in w for w in fp.warnings)


def test_compared_with_the_filesystem_measured_now(tmp_path):
    from denpex_tui.probes.sampler import read_path

    cfg = load_config(str(CFG))
    for k in ("offload_param", "offload_optimizer"):
        cfg["zero_optimization"][k]["nvme_path"] = str(tmp_path)
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    small = compute(cfg, 1_000_000, 1, 1)  # a few MB: fits
    judge(small, {str(tmp_path): read_path(str(tmp_path))})
    assert small.nvme_paths[0]["fits"] is True
    big = compute(cfg, (free // 18 + 1) * 8, 8, 1)  # 18 B per parameter on one node: more than is free
    judge(big, {str(tmp_path): read_path(str(tmp_path))})
    e = big.nvme_paths[0]
    assert e["fits"] is False and e["measured"]["bytes_free"] > 0
    assert any("does not fit" in w for w in big.warnings)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "denpex_tui", "footprint", *args],
                          capture_output=True, text=True, timeout=60)


def test_cli():
    r = _cli("--config", str(CFG), "--params", "7e9", "--world-size", "64", "--nodes", "8", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1 and doc["per_node"]["nvme_bytes"] == 15_750_000_000
    assert any("engine.py" in s for s in doc["sources"]) and doc["formula"]
    t = _cli("--config", str(CFG), "--params", "7e9", "--world-size", "64", "--nodes", "8")
    assert "Pr = ceil(P / W)" in t.stdout and "stage3.py:840" in t.stdout
    bad = _cli("--config", str(CFG), "--params", "lots", "--world-size", "64")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and bad.stderr.count("\n") == 1
    missing = _cli("--config", "/nonexistent.json", "--params", "7e9", "--world-size", "8")
    assert missing.returncode == 2


def test_matches_what_a_real_zero3_nvme_run_wrote():
    # tests/fixtures/footprint/measured_zero3_nvme_cpu.*: the config and the swap/checkpoint file
    # sizes of a real DeepSpeed 0.19.8 run (checkpoints/make/ds_nvme_train.py, 2 ranks, CPU).
    fix = ROOT / "tests" / "fixtures" / "footprint"
    sizes = [ln.split(" ", 1) for ln in (fix / "measured_zero3_nvme_cpu.sizes").read_text().splitlines()
             if ln and not ln.startswith("#")]

    def total(pred):
        return sum(int(n) for n, p in sizes if pred(p))

    fp = compute(load_config(str(fix / "measured_zero3_nvme_cpu.json")), 2_097_152, 2, 1, optimizer="Adam")
    opt0 = lambda p: "/optimizer/rank0/" in p  # noqa: E731
    assert fp.per_rank["optimizer_state_bytes"] == total(lambda p: opt0(p) and "gradient" not in p)
    assert fp.per_rank["gradient_bytes"] == total(lambda p: opt0(p) and "gradient" in p)
    assert fp.per_rank["param_bytes"] == total(lambda p: "params/rank0/" in p)
    assert fp.checkpoint_copy["per_rank"] == total(lambda p: "offloaded_tensors/rank00/" in p)
    assert fp.per_node["nvme_bytes"] == total(lambda p: p.startswith("<nvme>/"))


def test_from_the_logs_of_the_real_run():
    # the same real run's own logs (DeepSpeed's config echo at INFO, the script's parameter count)
    from denpex_tui.core.footprint_logs import config_from_logs

    logs = ROOT / "tests" / "fixtures" / "footprint" / "zero3_nvme_run"
    files = sorted(str(p) for p in logs.rglob("*.log"))
    cfg, params, world, where = config_from_logs(files)
    assert params == 2_097_152 and world == 2
    z = cfg["zero_optimization"]
    assert z["stage"] == 3 and z["offload_param"]["nvme_path"] == "/local_nvme"
    assert z["offload_param"]["buffer_size"] == 2_000_000 and z["offload_param"]["max_in_cpu"] == 0
    assert z["offload_optimizer"]["device"] == "nvme" and cfg["aio"]["intra_op_parallelism"] == 1
    assert cfg["bf16"] == {"enabled": False}
    measured = compute(load_config(str(ROOT / "tests" / "fixtures" / "footprint" / "measured_zero3_nvme_cpu.json")),
                       2_097_152, 2, 1, optimizer="Adam")
    fp = compute(cfg, params, world, 1, optimizer="Adam")
    assert fp.per_rank == measured.per_rank and fp.pinned_host_per_rank == measured.pinned_host_per_rank
    r = _cli("--from-logs", str(logs), "--nodes", "1", "--optimizer", "Adam", "--no-measure", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["per_rank"]["nvme_bytes"] == 20_971_520


def test_from_corpus_logs_without_offload():
    from helpers import CORPUS

    from denpex_tui.core.footprint_logs import config_from_logs

    files = sorted(str(p) for p in (CORPUS / "deepspeed_enospc_checkpoint").rglob("stdout.log"))
    cfg, params, world, _ = config_from_logs(files)
    assert cfg["zero_optimization"]["stage"] == 2 and world == 4 and cfg["optimizer"]["type"] == "adamw"
    assert "offload_param" not in cfg["zero_optimization"]
    r = _cli("--from-logs", str(CORPUS / "deepspeed_enospc_checkpoint"), "--params", "1e6")
    assert r.returncode == 2 and "offloads nothing" in r.stderr
    nolog = _cli("--from-logs", str(CORPUS / "clean_run"), "--params", "1e6")
    assert nolog.returncode == 2 and "config echo" in nolog.stderr


def test_the_real_enospc_job_did_not_fit_its_tmpfs():
    from denpex_tui.core.footprint_logs import config_from_logs

    fix = ROOT / "tests" / "fixtures" / "footprint"
    files = sorted(str(p) for p in (fix / "zero3_nvme_enospc").rglob("*.log"))
    # it died in its first swap, before DeepSpeed printed its config: the optimizer swapper's dump
    # (A8) is what there is; the parameter swapper printed before the log level was set
    cfg, params, world, where = config_from_logs(files)
    assert params is None and world is None
    assert cfg["zero_optimization"]["offload_optimizer"]["nvme_path"] == "/local_nvme"
    assert any("offload_param: not in the logs" in w for w in where)
    fp = compute(cfg, 2_097_152, 2, 1, optimizer="Adam")
    size = (fix / "zero3_nvme_enospc" / "df_h.txt").read_text().splitlines()[1].split()[1]
    assert size == "12M"
    judge(fp, {"/local_nvme": {"bytes_free": 12 << 20, "inodes_free": None, "fs_class": "memory"}})
    # optimizer state + gradients of 2 ranks: 32 MiB (the parameters' 8 MiB more), on 12 MiB
    assert fp.nvme_paths[0]["fits"] is False and fp.per_node["nvme_bytes"] == 32 << 20
