"""Evidence bundles are made to be shared: nothing from outside the job's tree, no secret, no
planted code run, no debris (issue 19, items 1, 2, 3 and 12). Real files, real links, real
secret formats, a real planted ``torch`` package and a real full tmpfs."""

import base64
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from helpers import CORPUS

FAIL = CORPUS / "enospc_checkpoint_fastfail"


def _denpex(*args, cwd=None, env=None, timeout=180):
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)  # the package, from any cwd
    return subprocess.run([sys.executable, "-m", "denpex_tui", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=e)


def _job(tmp_path) -> Path:
    job = tmp_path / "job"
    shutil.copytree(FAIL, job)
    return job


def _rank_dir(job: Path, rank: int) -> Path:
    return next((job / "logs").glob(f"*/attempt_0/{rank}"))


def _bundle_text(out: Path) -> str:
    """Every byte of the bundle, folder or tar.gz, as text."""
    parts = []
    if out.is_dir():
        for p in sorted(out.rglob("*")):
            if p.is_file():
                parts.append(p.read_text(errors="replace"))
    else:
        with tarfile.open(out) as tar:
            for m in tar:
                if m.isfile():
                    parts.append(tar.extractfile(m).read().decode(errors="replace"))
    return "\n".join(parts)


def _private_key(path: Path) -> str:
    subprocess.run(["openssl", "genrsa", "-out", str(path), "2048"], check=True, capture_output=True)
    return path.read_text()


# -- 1. nothing outside the job's tree -------------------------------------------------------


def test_a_link_to_a_private_key_outside_the_job_is_never_copied(tmp_path):
    job = _job(tmp_path)
    home = tmp_path / "home" / ".ssh"
    home.mkdir(parents=True)
    key = _private_key(home / "id_rsa")
    body = key.splitlines()[5]
    other = tmp_path / "elsewhere.log"  # another job's log, with timestamps like the rank's
    other.write_text("".join(f"2026-11-29 17:4{i}:00,000 INFO other job SECRET-MARKER-{i}\n" for i in range(10)))
    r2 = _rank_dir(job, 2)
    (r2 / "stdout.log").unlink()
    (r2 / "stdout.log").symlink_to(home / "id_rsa")  # the rank's other file: untimestamped
    r1 = _rank_dir(job, 1)
    (r1 / "stdout.log").unlink()
    (r1 / "stdout.log").symlink_to(other)
    for out in (tmp_path / "b", tmp_path / "b.tar.gz"):
        r = _denpex("evidence", str(job), "-o", str(out))
        assert r.returncode == 0, r.stderr
        text = _bundle_text(out)
        assert body not in text and "PRIVATE KEY" not in text
        assert "SECRET-MARKER" not in text
        assert "leads outside the job's tree" in r.stderr  # said, not silent
    doc = json.loads((tmp_path / "b" / "diagnosis.json").read_text())
    assert not any("id_rsa" in s["path"] or "elsewhere" in s["path"] for s in doc["scan"]["sources"])
    assert doc["scan"]["incidents"][0]["initiating"]["rank"] == 2  # the diagnosis still stands


def test_a_link_swapped_after_the_scan_is_refused_at_open(tmp_path):
    from denpex_tui.core.evidence import Outside, excerpt, job_roots

    job = tmp_path / "job"
    job.mkdir()
    (job / "a.log").write_text("line\n" * 5)
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret\n")
    roots = job_roots([str(job)])
    assert excerpt(str(job / "a.log"), 2, roots=roots)[2].count("line") == 5
    (job / "a.log").unlink()
    (job / "a.log").symlink_to(secret)
    with pytest.raises(Outside):
        excerpt(str(job / "a.log"), 1, roots=roots)


# -- 3. secrets ---------------------------------------------------------------------------


def _jwt() -> str:
    def b64(b: bytes) -> str:
        return base64.urlsafe_b64encode(b).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps({"sub": "svc-trainer", "iat": 1796160000}).encode())
    sig = b64(hmac.new(b"k" * 32, f"{head}.{body}".encode(), hashlib.sha256).digest())
    return f"{head}.{body}.{sig}"


SECRETS = {
    "hf": "hf_" + "QpXzKvWmRtYbNcLdHgFsJaEoUiTyReWqPl"[:34],
    "aws_id": "AKIAIOSFODNN7EXAMPLE",  # AWS's documented example pair: the real formats
    "aws_secret": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "ghp": "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5",
    "gh_pat": "github_pat_11ABCDE2Q0" + "x7Yw" * 5 + "_" + "Kq9Lm2Np4Rs6Tu8Vw0Xy" * 3 + "AbCdEfGhIjKlMnOpQrSt",
    "jwt": _jwt(),
}


def test_secrets_of_each_kind_are_redacted_in_every_file_and_the_lines_kept(tmp_path):
    job = _job(tmp_path)
    key = _private_key(tmp_path / "k.pem")
    r2 = _rank_dir(job, 2)
    err = (r2 / "stderr.log").read_text().splitlines(keepends=True)
    leak = [f"[rank2]: hub login ok, token {SECRETS['hf']} cached\n",
            f"[rank2]: export AWS_ACCESS_KEY_ID={SECRETS['aws_id']} AWS_SECRET_ACCESS_KEY={SECRETS['aws_secret']}\n",
            f"[rank2]: cloning https://oauth2:{SECRETS['ghp']}@github.com/org/data.git\n",
            f"[rank2]: GITHUB_TOKEN={SECRETS['gh_pat']}\n",
            f"[rank2]: curl -H 'Authorization: Bearer {SECRETS['jwt']}' https://registry/api\n"]
    leak += [f"[rank2]: {x}\n" for x in key.splitlines()]
    text = "".join(leak + err).replace("basic_ios::clear: iostream error",
                                        f"basic_ios::clear: iostream error (upload token {SECRETS['hf']})", 1)
    (r2 / "stderr.log").write_text(text)
    env = dict(os.environ, HF_TOKEN=SECRETS["hf"], AWS_SECRET_ACCESS_KEY=SECRETS["aws_secret"],
               GITHUB_TOKEN=SECRETS["ghp"], NCCL_DEBUG="INFO", NCCL_IB_HCA="mlx5_0",
               MY_SERVICE_URL=f"https://u:{SECRETS['ghp']}@x")
    scan = _denpex("scan", "--json", str(job))
    assert SECRETS["hf"] in scan.stdout  # the scan itself shows the logs as they are
    out = tmp_path / "b"
    r = _denpex("evidence", str(job), "-o", str(out), "--with-env", env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    text = _bundle_text(out)
    for name, value in SECRETS.items():
        assert value not in text, name
    for line in key.splitlines()[1:-1]:
        assert line not in text
    assert "redacted in" in r.stdout
    exc = next(p for p in (out / "excerpts").glob("rank2-initiating-*.txt") if "stdout" not in p.name).read_text()
    assert "hub login ok, token [redacted: Hugging Face token] cached" in exc  # the line is kept
    assert "AWS_SECRET_ACCESS_KEY=[redacted: AWS secret key]" in exc
    assert "Authorization: Bearer [redacted: bearer token]" in exc
    assert "-----BEGIN PRIVATE KEY-----" in exc and "[redacted: private key block line]" in exc
    readme = (out / "README.txt").read_text()
    assert "detect-secrets" in readme and "excerpts/" in readme.split("Secrets:")[1]
    environment = (out / "env" / "environment.txt").read_text()
    assert "NCCL_DEBUG=INFO" in environment and "NCCL_IB_HCA=mlx5_0" in environment
    assert "HF_TOKEN" not in environment and "GITHUB_TOKEN" not in environment and "MY_SERVICE_URL" not in environment
    assert "other variables withheld" in environment
    doc = json.loads((out / "diagnosis.json").read_text())
    assert "[redacted: Hugging Face token]" in json.dumps(doc)  # the finding's text, redacted


def test_the_bundles_probe_readings_hold_only_the_jobs_own_processes(tmp_path):
    job = _job(tmp_path)
    elsewhere = tmp_path / "other-job"
    elsewhere.mkdir()
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="2")
    code = "import time; time.sleep(120)"
    other = subprocess.Popen([sys.executable, "-c", code, "--hub-token", SECRETS["hf"] + "x", "--other-job"],
                             cwd=elsewhere, env=env)
    ours = subprocess.Popen([sys.executable, "-c", code, "--ours"], cwd=job, env=env)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(
                Path(f"/proc/{p.pid}/cmdline").read_bytes().count(b"time.sleep") for p in (other, ours)):
            time.sleep(0.05)
        out = tmp_path / "b"
        r = _denpex("evidence", str(job), "-o", str(out))
        assert r.returncode == 0, r.stderr
        probe = json.loads((out / "probe.json").read_text())
        pids = {p["pid"] for p in probe["snapshot"]["processes"]}
        assert ours.pid in pids and other.pid not in pids
        assert "--other-job" not in (out / "probe.json").read_text()
    finally:
        for p in (other, ours):
            p.kill()
            p.wait()


def test_the_copied_incident_summary_is_redacted():
    from denpex_tui.app.summary import incident_summary
    from denpex_tui.core.model import Finding, Incident
    from denpex_tui.core.story import job_story

    f = Finding(signature="os.enospc", title="No space left on device", role="initiating", severity="error",
                phase="checkpoint", family="os", path="/j/rank2.log", line=7, text_line=7, offset=0,
                text=f"OSError: [Errno 28] No space left on device (uploading with token {SECRETS['hf']})",
                rank=2)
    inc = Incident(attempt=0, initiating=f, collateral=[], same_cause=[], first_warning=None, confidence="high",
                   evidence=[f"rank 2 line: Bearer {SECRETS['jwt']}"], summary="x")
    text = incident_summary(job_story([inc]))
    assert SECRETS["hf"] not in text and SECRETS["jwt"] not in text
    assert "uploading with token [redacted: Hugging Face token]" in text
    assert "redacted before copying: " in text


# -- 2. --with-env runs nothing planted ------------------------------------------------------


def test_with_env_never_runs_a_planted_torch_or_nvidia_smi(tmp_path):
    job = _job(tmp_path)
    shared = tmp_path / "shared-folder"  # where the user runs denpex: writable by others
    (shared / "torch" / "utils").mkdir(parents=True)
    ran = tmp_path / "PLANTED-RAN"
    plant = f"open({str(ran)!r}, 'a').write('torch\\n')\n"
    (shared / "torch" / "__init__.py").write_text(plant)
    (shared / "torch" / "utils" / "__init__.py").write_text(plant)
    (shared / "torch" / "utils" / "collect_env.py").write_text(plant + "print('planted collect_env')\n")
    smi = shared / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho smi >> {ran}\necho planted smi\n")
    smi.chmod(0o755)
    env = dict(os.environ, PATH=".:" + os.environ.get("PATH", "/usr/bin"), PYTHONSTARTUP=str(smi))
    r = _denpex("evidence", str(job), "-o", str(tmp_path / "b"), "--with-env", cwd=shared, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert not ran.exists(), ran.read_text()
    text = _bundle_text(tmp_path / "b")
    assert "planted" not in text
    assert "-I -m torch.utils.collect_env" in (tmp_path / "b" / "env" / "collect_env.txt").read_text()


# -- 12. no debris on failure ------------------------------------------------------------------


@pytest.fixture
def tiny_fs(tmp_path):
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root to mount a tmpfs")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode()[-200:]}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_evidence_onto_a_full_filesystem_leaves_nothing_and_a_retry_works(tmp_path, tiny_fs):
    job = _job(tmp_path)
    before_tmp = set(os.listdir("/tmp"))
    for out in (tiny_fs / "b.tar.gz", tiny_fs / "b"):
        r = _denpex("evidence", str(job), "-o", str(out))
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.count("\n") == 1 and "No space left on device" in r.stderr and "Traceback" not in r.stderr
        assert os.listdir(tiny_fs) == [], os.listdir(tiny_fs)
    assert not {x for x in set(os.listdir("/tmp")) - before_tmp if x.startswith("denpex-evidence")}
    (tiny_fs / "b").mkdir()  # an empty folder given as -o is fine, and stays usable
    assert _denpex("evidence", str(job), "-o", str(tiny_fs / "b")).returncode == 2
    assert os.listdir(tiny_fs) == ["b"] and os.listdir(tiny_fs / "b") == []
    subprocess.run(["mount", "-o", "remount,size=16m", str(tiny_fs)], check=True)
    for out in (tiny_fs / "b.tar.gz", tiny_fs / "b"):
        r = _denpex("evidence", str(job), "-o", str(out))
        assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tiny_fs)) == ["b", "b.tar.gz"]
    assert (tiny_fs / "b" / "diagnosis.json").is_file()
