"""`denpex verify` and `denpex evidence` on the real corpus runs."""

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from helpers import CORPUS

from denpex_tui.core.progress import read_progress

FAIL = str(CORPUS / "enospc_checkpoint_fastfail")
CLEAN = str(CORPUS / "clean_run")
DS_FAIL = str(CORPUS / "deepspeed_enospc_checkpoint")
DS_CLEAN = str(CORPUS / "deepspeed_clean_run")
SIG = "torch.save-write-failed"


def _denpex(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "denpex_tui", *args], capture_output=True, text=True, timeout=timeout)


def test_progress_read_from_real_logs():
    rank2 = next((CORPUS / "enospc_checkpoint_fastfail" / "logs").glob("*/attempt_0/2/stdout.log"))
    p = read_progress(str(rank2))
    assert p.last_step == 100 and p.saves_completed == 3  # the 4th save (step 100) failed
    rank0 = next((CORPUS / "clean_run" / "logs").glob("*/attempt_0/0/stdout.log"))
    q = read_progress(str(rank0))
    assert q.last_step == 200 and q.saves_completed == 8


def test_verify_clean_rerun_passes():
    r = _denpex("verify", SIG, CLEAN, "--from", FAIL)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every rank reached step 200" in r.stdout and "PASS" in r.stdout


def test_verify_the_failing_run_fails_naming_what_is_still_there():
    r = _denpex("verify", SIG, FAIL, "--from", FAIL, "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and {s["rank"] for s in doc["still_there"]} == {2}
    assert doc["baseline"]["step"] == 100


def test_verify_a_rerun_that_stopped_earlier_fails(tmp_path):
    # the failing run itself, cut before the failure: the signature is gone but it got less far
    src = next((CORPUS / "clean_run" / "logs").glob("*/attempt_0"))
    for rank_dir in src.iterdir():
        d = tmp_path / "logs" / "x" / "attempt_0" / rank_dir.name
        d.mkdir(parents=True)
        lines = (rank_dir / "stdout.log").read_text().splitlines(keepends=True)
        (d / "stdout.log").write_text("".join(lines[:12]))  # up to step 60-ish of 200
        (d / "stderr.log").write_text("")
    r = _denpex("verify", SIG, str(tmp_path), "--step", "100")
    assert r.returncode == 1 and "did NOT get as far" in r.stdout


def test_a_rerun_that_is_not_the_same_job_cannot_pass(tmp_path):
    """verify printed PASS while noting that the rerun had fewer ranks than the failing run
    (issue 20): a rerun on one node of a four-node job did not repeat the job."""
    import shutil

    shutil.copytree(Path(DS_CLEAN) / "node0", tmp_path / "node0")
    r = _denpex("verify", str(tmp_path), "--from", DS_FAIL)
    assert r.returncode == 1, r.stdout
    assert "not the same job: the rerun has 1 rank, the failing run had 4" in r.stdout
    assert r.stdout.rstrip().endswith("FAIL")
    doc = json.loads(_denpex("verify", "--json", str(tmp_path), "--from", DS_FAIL).stdout)
    assert doc["ok"] is False and doc["rerun"]["same_job"] is False


def test_verify_a_rank_the_launcher_says_was_killed():
    """'the failing run does not show proc.killed' was said of the run whose diagnosis it is."""
    runs = CORPUS.parent / "runs"
    r = _denpex("verify", str(runs / "deepspeed_each_rank_log_clean"), "--from", str(runs / "deepspeed_each_rank_log_kill9"))
    assert "does not show" not in r.stderr, r.stderr
    assert r.returncode == 0 and "failing run: proc.killed on rank 1 at step 20" in r.stdout, r.stdout


def test_verify_deepspeed_pair_and_bad_input():
    assert _denpex("verify", DS_CLEAN, "--from", DS_FAIL).returncode == 0
    assert _denpex("verify", DS_FAIL, "--from", DS_FAIL).returncode == 1
    for bad in (["os.no-such-signature", CLEAN, "--from", FAIL], [SIG, CLEAN], [SIG, "/no/such/dir", "--from", FAIL]):
        r = _denpex("verify", *bad)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("ev") / "bundle"
    r = _denpex("evidence", DS_FAIL, "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


def test_evidence_bundle_contents(bundle):
    names = sorted(str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file())
    assert {"README.txt", "diagnosis.txt", "diagnosis.json", "probe.json"} <= set(names)
    assert not any(n.startswith("env/") for n in names)  # only with --with-env
    doc = json.loads((bundle / "diagnosis.json").read_text())
    ini = doc["scan"]["incidents"][0]["initiating"]
    assert ini["rank"] == 2
    ex = [e for e in doc["excerpts"] if e["role"] == "initiating"][0]
    text = (bundle / "excerpts" / f"rank2-initiating-{ini['signature']}.txt").read_text()
    lines = text.splitlines()
    assert lines[0].startswith("# ") and f"line {ini['line']}" in lines[0]
    marked = [ln for ln in lines if ln.startswith(">")]
    assert len(marked) == 1 and marked[0].split(":")[0].strip("> ") == str(ini["line"])
    # 100 lines before when the file has them, 20 after, from the rank's own file
    assert ex["from_line"] == max(1, ini["line"] - 100) and ex["to_line"] <= ini["line"] + 20
    src_lines = open(ini["path"], encoding="utf-8", errors="replace").read().splitlines()
    assert lines[1].split(": ", 1)[1] == src_lines[ex["from_line"] - 1]
    collateral = {e["rank"] for e in doc["excerpts"] if e["role"] == "collateral"}
    assert collateral == {0, 1, 3}
    probe = json.loads((bundle / "probe.json").read_text())
    assert probe["snapshot"]["host"] and probe["snapshot"]["time"] and "not at failure time" in probe["note"]
    assert doc["scan"]["versions"].get("deepspeed")
    readme = (bundle / "README.txt").read_text()
    assert "Size cap" in readme and "deepspeed" in readme and "denpex scan" in readme
    assert doc["verify_baseline"]["step"] == 60


def test_scan_reads_the_bundle_back_with_the_same_diagnosis(bundle):
    orig = json.loads(_denpex("scan", "--json", DS_FAIL).stdout)
    back = _denpex("scan", "--json", str(bundle))
    assert back.returncode == 1
    doc = json.loads(back.stdout)
    assert doc["incidents"] == orig["incidents"]
    assert doc["findings"] == orig["findings"]
    text = _denpex("scan", str(bundle)).stdout
    assert "rank 2 initiating" in text


def test_tar_gz_bundle_and_verify_from_it(tmp_path):
    out = tmp_path / "ev.tar.gz"
    r = _denpex("evidence", FAIL, "-o", str(out))
    assert r.returncode == 0, r.stderr
    with tarfile.open(out) as tar:
        assert "ev/README.txt" in tar.getnames()
    assert _denpex("verify", CLEAN, "--from", str(out)).returncode == 0
    assert _denpex("verify", FAIL, "--from", str(out)).returncode == 1
    again = _denpex("evidence", FAIL, "-o", str(out))
    assert again.returncode == 2  # never overwrites


def test_with_env_runs_the_commands_only_when_asked(tmp_path):
    out = tmp_path / "b"
    r = _denpex("evidence", FAIL, "-o", str(out), "--with-env", timeout=240)
    assert r.returncode == 0, r.stderr
    assert (out / "env" / "nvidia-smi.txt").read_text().startswith("$ nvidia-smi")
    assert "torch.utils.collect_env" in (out / "env" / "collect_env.txt").read_text().splitlines()[0]


def test_a_hostile_or_damaged_bundle_is_read_safely(bundle, tmp_path):
    import shutil

    evil = tmp_path / "evil"
    shutil.copytree(bundle, evil)
    doc = json.loads((evil / "diagnosis.json").read_text())
    doc["scan"]["incidents"][0]["initiating"]["text"] = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J owned"
    doc["scan"]["incidents"][0]["summary"] = "\x1b[31mred\x1b[0m"
    (evil / "diagnosis.json").write_text(json.dumps(doc))
    r = _denpex("scan", str(evil))
    assert r.returncode == 1 and "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "owned" in r.stdout
    doc["scan"]["incidents"][0]["initiating"]["time_full"] = "not a time"
    (evil / "diagnosis.json").write_text(json.dumps(doc))
    bad = _denpex("scan", str(evil))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_the_size_cap_leaves_ranks_out_and_says_so(tmp_path, monkeypatch):
    from denpex_tui.core import evidence
    from denpex_tui.core.scan import scan_paths

    res = scan_paths([DS_FAIL], jobs=1)
    monkeypatch.setattr(evidence, "MAX_BYTES", 6000)  # room for about one rank's excerpts
    b = evidence.write_bundle(res, str(tmp_path / "small"), argv=["denpex"], diagnosis_text="x\n")
    assert b.left_out and all("cap" in x for x in b.left_out)
    readme = (tmp_path / "small" / "README.txt").read_text()
    assert "Left out:" in readme and "initiating" in json.dumps(
        json.loads((tmp_path / "small" / "diagnosis.json").read_text())["excerpts"][0]["role"])


def test_a_training_process_with_a_non_utf8_argv_does_not_break_the_bundle(tmp_path):
    import os
    import time

    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    # runs in the job's folder: tied to it (a bundle holds only the job's own processes)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", b"train\xff\x1b[2J.py"], env=env,
                            cwd=FAIL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not os.path.exists(f"/proc/{proc.pid}/cmdline"):
            time.sleep(0.05)
        r = _denpex("evidence", FAIL, "-o", str(tmp_path / "b"))
        assert r.returncode == 0, r.stderr
        probe = json.loads((tmp_path / "b" / "probe.json").read_text())
        mine = [p for p in probe["snapshot"]["processes"] if p["pid"] == proc.pid]
        assert mine and "\x1b" not in json.dumps(mine, ensure_ascii=False)
    finally:
        proc.kill()
        proc.wait()


NVME_FAIL = str(CORPUS.parent / "footprint" / "zero3_nvme_enospc")
NVME_CLEAN = str(CORPUS.parent / "footprint" / "zero3_nvme_run")


def test_verify_on_the_real_nvme_enospc_pair():
    # the failure came before the first step: the rerun must print steps on every rank
    ok = _denpex("verify", "deepspeed.swap-short-file", NVME_CLEAN, "--from", NVME_FAIL)
    assert ok.returncode == 0, ok.stdout
    bad = _denpex("verify", "deepspeed.swap-short-file", NVME_FAIL, "--from", NVME_FAIL, "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["still_there"][0]["rank"] == 1


def test_evidence_of_the_real_nvme_enospc(tmp_path):
    out = tmp_path / "nv"
    assert _denpex("evidence", NVME_FAIL, "-o", str(out)).returncode == 0
    texts = {p.name: p.read_text() for p in (out / "excerpts").iterdir()}
    mine = [t for n, t in texts.items() if n.startswith("rank1-")]
    assert any("file_offset + buffer nbytes > file bytes 4194304 > 0" in t for t in mine)


def test_the_real_nvme_enospc_is_diagnosed():
    doc = json.loads(_denpex("scan", "--json", "--no-measure", NVME_FAIL).stdout)
    inc = doc["incidents"][0]
    assert inc["initiating"]["rank"] == 1 and inc["initiating"]["signature"] == "deepspeed.swap-short-file"
    assert {c["rank"] for c in inc["collateral"]} == {0}
