"""A bundle's JSON and a signature pack's TOML are untrusted (issue 19, item 8): size and depth
are bounded before a parser sees them, types are checked, a bad pack file is one line."""

import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from helpers import CORPUS, ROOT

FAIL = CORPUS / "enospc_checkpoint_fastfail"
CLEAN = CORPUS / "clean_run"


def _denpex(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "denpex_tui", *args], capture_output=True, text=True,
                          timeout=timeout)


def _one_line_error(r):
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr)
    assert r.stderr.count("\n") == 1 and "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def _tar_bundle(path: Path, doc_bytes: bytes) -> None:
    with tarfile.open(path, "w:gz", compresslevel=9) as tar:
        info = tarfile.TarInfo("b/diagnosis.json")
        info.size = len(doc_bytes)
        tar.addfile(info, io.BytesIO(doc_bytes))


def _peak_rss_mb(*args) -> tuple[subprocess.CompletedProcess, float]:
    """Run denpex and return its peak RSS (its own and its forked worker's), in MB."""
    code = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + '\\n' + r.stderr); "
            "sys.exit(r.returncode)")
    p = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "denpex_tui", *args],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    kb, _, err = p.stdout.partition("\n")
    return subprocess.CompletedProcess(p.args, p.returncode, "", err), int(kb) / 1024


def test_a_gzip_bomb_of_zeros_is_refused_in_bounded_memory(tmp_path):
    body = b'{"schema": 1, "kind": "denpex-evidence", "scan": {"findings": [' + b"0," * (50 << 20) + b"0]}}"
    bomb = tmp_path / "bomb.tar.gz"
    _tar_bundle(bomb, body)
    assert bomb.stat().st_size < 200_000  # ~100 KB holding 100 MB
    r, rss = _peak_rss_mb("scan", str(bomb))
    _one_line_error(r)
    assert "larger than 64 MiB" in r.stderr
    assert rss < 200, rss  # was 512 MB
    r, rss = _peak_rss_mb("verify", "os.enospc", str(CLEAN), "--from", str(bomb))
    _one_line_error(r)
    assert rss < 200, rss


def test_a_bundle_of_many_small_values_under_the_size_cap_is_refused_too(tmp_path):
    body = b'{"schema": 1, "kind": "denpex-evidence", "scan": {"findings": [' + b"0," * (5 << 20) + b"0]}}"
    b = tmp_path / "many.tar.gz"
    _tar_bundle(b, body)
    r, rss = _peak_rss_mb("scan", str(b))
    _one_line_error(r)
    assert "values" in r.stderr and rss < 200, (r.stderr, rss)


def test_deep_nesting_in_diagnosis_json_in_a_bundle_or_a_plain_folder(tmp_path):
    deep = b'{"schema": 1, "kind": "denpex-evidence", "scan": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    tb = tmp_path / "deep.tar.gz"
    _tar_bundle(tb, deep)
    r = _denpex("scan", str(tb))
    _one_line_error(r)
    assert "nested deeper than 64 levels" in r.stderr
    folder = tmp_path / "job"  # a plain folder of logs that happens to hold such a file
    shutil.copytree(FAIL, folder)
    (folder / "diagnosis.json").write_bytes(deep)
    r = _denpex("scan", str(folder))
    assert r.returncode == 1, r.stderr  # the logs are scanned: rank 2's failure is found
    assert "rank 2 initiating" in r.stdout and "internal error" not in r.stderr
    assert "nested deeper than 64 levels" in r.stderr
    r = _denpex("verify", "torch.save-write-failed", str(CLEAN), "--from", str(tb))
    _one_line_error(r)


@pytest.fixture(scope="module")
def good_bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("ev") / "good"
    r = _denpex("evidence", str(FAIL), "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


def _edited(good: Path, where: Path, edit) -> Path:
    shutil.copytree(good, where)
    doc = json.loads((where / "diagnosis.json").read_text())
    edit(doc)
    (where / "diagnosis.json").write_text(json.dumps(doc))
    return where


def test_verify_from_the_bundle_of_a_clean_run_is_one_line(tmp_path):
    out = tmp_path / "clean-bundle"
    assert _denpex("evidence", str(CLEAN), "-o", str(out)).returncode == 0
    assert json.loads((out / "diagnosis.json").read_text())["verify_baseline"] is None
    r = _denpex("verify", "torch.save-write-failed", str(CLEAN), "--from", str(out))
    _one_line_error(r)
    assert "records no failure to verify against" in r.stderr
    r = _denpex("verify", "torch.save-write-failed", str(CLEAN), "--from", str(out), "--step", "100")
    assert r.returncode == 0, r.stdout + r.stderr  # with the step given, it can be judged


@pytest.mark.parametrize("name,edit", [
    ("step", lambda d: d["verify_baseline"].__setitem__("step", "x")),
    ("ranks", lambda d: d["verify_baseline"].__setitem__("ranks", "0-3")),
    ("signatures", lambda d: d["verify_baseline"].__setitem__("signatures", "torch.save-write-failed")),
    ("where", lambda d: d["verify_baseline"]["where"][0].__setitem__("step", [1])),
    ("rank", lambda d: d["scan"]["incidents"][0]["initiating"].__setitem__("rank", {"a": 1})),
    ("source-ranks", lambda d: d["scan"]["sources"][0].__setitem__("ranks", "0,1")),
    ("line", lambda d: d["scan"]["findings"][0].__setitem__("line", "7")),
    ("time", lambda d: d["scan"]["findings"][0].__setitem__("time_full", 12)),
    ("scan", lambda d: d.__setitem__("scan", [1, 2])),
])
def test_a_bundle_with_wrong_types_is_one_line_in_scan_and_verify(good_bundle, tmp_path, name, edit):
    b = _edited(good_bundle, tmp_path / name, edit)
    scan = _denpex("scan", str(b))
    ver = _denpex("verify", "torch.save-write-failed", str(CLEAN), "--from", str(b))
    for r in (scan, ver):
        assert "internal error" not in r.stderr and "Traceback" not in r.stderr, (name, r.stderr)
    if name in ("step", "ranks", "signatures", "where"):
        _one_line_error(ver)
    if name in ("rank", "source-ranks", "line", "time", "scan"):
        _one_line_error(scan)


def _good_signature(tmp_path: Path) -> None:
    src = (ROOT / "denpex_tui" / "signatures" / "os.erofs.toml").read_text()
    (tmp_path / "team.erofs-copy.toml").write_text(src.replace('id = "os.erofs"', 'id = "team.erofs-copy"')
                                                   .replace('family = "os"', 'family = "team"'))


def test_a_nested_array_in_one_pack_file_is_one_line_and_the_rest_loads(tmp_path):
    pack = tmp_path / "pack"
    pack.mkdir()
    _good_signature(pack)
    (pack / "team.deep.toml").write_text('schema = 1\nid = "team.deep"\npatterns = ' + "[" * 50_000 + "]" * 50_000 + "\n")
    (pack / "team.deep-table.toml").write_text("schema = 1\nx = " + "{a = " * 20_000 + "1" + "}" * 20_000 + "\n")
    check = _denpex("signatures", "--check", str(pack))
    assert "internal error" not in check.stderr and "Traceback" not in check.stderr, check.stderr
    bad_lines = [x for x in (check.stdout + check.stderr).splitlines() if "team.deep" in x]
    assert len(bad_lines) == 2 and all("nested deeper than 64 levels" in x for x in bad_lines), bad_lines
    shown = _denpex("signatures", "team.erofs-copy", "--signatures", str(pack))
    assert shown.returncode == 0 and "Read-only file system" in shown.stdout, shown.stderr
    scan = _denpex("scan", "--signatures", str(pack), str(FAIL))
    assert scan.returncode == 1 and "rank 2 initiating" in scan.stdout, scan.stderr


def test_strings_and_comments_full_of_brackets_are_no_nesting():
    from denpex_tui.core.untrusted import check_toml, load_json

    check_toml('patterns = ["' + "\\\\[" * 500 + '", \'' + "[" * 500 + "']  # " + "[" * 500 + '\nx = """' + "{" * 500
               + '"""\n[[examples]]\nline = "a"\n', "t")
    assert load_json(json.dumps({"a": "[" * 10_000, "b": [[1]]}).encode(), "t")["b"] == [[1]]
