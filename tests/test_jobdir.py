"""Relative paths of the logs are resolved against the job's working directory, never the
user's (issue 20: 'cd /elsewhere && denpex scan JOB' measured /elsewhere/checkpoints)."""

from __future__ import annotations

import glob
import shutil
import subprocess
import sys

from helpers import CORPUS, ROOT

from denpex_tui.core.jobdir import JobDir, job_dir, resolve

DS_FAIL = CORPUS / "deepspeed_enospc_checkpoint"


def _scan(cwd, *args):
    return subprocess.run([sys.executable, "-m", "denpex_tui", "scan", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_resolution_rules(tmp_path):
    log = str(tmp_path / "job" / "logs" / "none_ab12cd34" / "attempt_0" / "3" / "stderr.log")
    d = job_dir(log)
    assert d.path == str(tmp_path / "job") and "--log-dir" in d.how
    assert resolve("./checkpoints/rank3", d) == (str(tmp_path / "job" / "checkpoints" / "rank3"), True)
    assert resolve("/abs/x", d) == ("/abs/x", None) and resolve("<path>", d) == ("<path>", None)
    unknown = job_dir(str(tmp_path / "console.log"))
    assert unknown.path is None and resolve("checkpoints", unknown) == ("checkpoints", False)
    assert job_dir(str(tmp_path / "console.log"), process_cwd=(4123, "/scratch/run")).path == "/scratch/run"
    assert "not in them" in JobDir(None, "?").note([], ["checkpoints"])


def test_a_relative_checkpoint_path_is_the_jobs_not_the_users(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _scan(elsewhere, str(DS_FAIL), "--control", str(CORPUS / "deepspeed_clean_run"))
    assert r.returncode == 1, r.stderr
    assert str(elsewhere) not in r.stdout, [ln for ln in r.stdout.splitlines() if str(elsewhere) in ln]
    node2 = str(DS_FAIL / "node2")
    assert f"df -h -- {node2}/checkpoints" in r.stdout  # measured where rank 2's job ran (node2/)
    assert f"resolved against {node2} (the parent of torchrun's --log-dir)" in r.stdout
    assert f"$ denpex checkpoints {node2}/checkpoints/global_step40" in r.stdout


def test_an_unknown_job_directory_is_said_and_nothing_is_measured_against_ours(tmp_path):
    # rank 3's stderr of the fd-leak run alone: './checkpoints/rank3/...' and no torchrun layout
    src = glob.glob(str(CORPUS / "fd_leak_emfile" / "logs" / "*" / "attempt_0" / "3" / "stderr.log"))[0]
    shutil.copy(src, tmp_path / "rank3.err")
    (tmp_path / "checkpoints").mkdir()  # a folder of the same name here: must not be taken for the job's
    r = _scan(tmp_path, "rank3.err")
    assert "the job's working directory is not in them" in r.stdout
    assert str(tmp_path / "checkpoints") not in r.stdout
