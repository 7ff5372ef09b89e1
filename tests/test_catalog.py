"""The catalog as data: validation, load order, lint, and every signature's own examples."""

import subprocess
import sys
from pathlib import Path

import pytest

from denpex_tui.core.catalog import BUILTIN_DIR, load_catalog, load_pack
from denpex_tui.core.lines.facts import parse_line

REQUIRED = [
    "deepspeed.nvme-offload-enospc", "deepspeed.fastfilewriter-fd-leak", "os.enospc", "os.emfile", "os.edquot",
    "os.shm-enospc", "os.oom-kill", "torch.save-write-failed", "nccl.watchdog-timeout", "dist.store-timeout",
    "dist.peer-closed", "dist.collective-timeout", "dist.rank-stalled", "cuda.oom", "torchelastic.child-failed",
    "python.uncaught-exception",
]


def test_builtin_catalog_loads_clean(catalog):
    assert [str(p) for p in catalog.problems] == []
    assert len(catalog) >= 60


@pytest.mark.parametrize("sid", REQUIRED)
def test_required_ids(catalog, sid):
    assert catalog.get(sid) is not None


def _examples():
    sigs, _ = load_pack(BUILTIN_DIR, builtin=True)
    for s in sigs:
        for i, e in enumerate(s.examples):
            yield pytest.param(s.id, e.line, e.match, id=f"{s.id}[{i}]{'+' if e.match else '-'}")


@pytest.mark.parametrize("sid,line,expected", list(_examples()))
def test_signature_example(catalog, matcher, sid, line, expected):
    """Every signature has real positive and negative lines; the best match of a positive
    line is the signature itself (or one that refines it)."""
    sig = catalog.get(sid)
    text = parse_line(line).text
    if not sig.evidence_only:
        assert sig.matches(text) is expected
    det = matcher.detect(text)
    if expected:
        assert det is not None, line
        best = det.sig
        assert best.id == sid or sid in best.refines, f"{line!r} -> {best.id}"
    elif sig.evidence_only:
        # A generic detector's id: its negative example must not come out as it.
        assert det is None or det.sig.id != sid, f"{line!r} -> {det.sig.id}"


def test_every_line_signature_has_both_examples(catalog):
    for s in catalog:
        if s.evidence_only:
            continue
        assert any(e.match for e in s.examples), s.id
        assert any(not e.match for e in s.examples), s.id


def _write(d: Path, name: str, body: str) -> None:
    (d / name).write_text(body)


GOOD = """schema = 1
id = "team.disk-full"
title = "Team disk full"
family = "team"
phase = "checkpoint-save"
role = "initiating"
severity = "error"
patterns = ['team quota hit on']
cause = "x"
symptoms = ["x"]
fix = ["x"]
references = ["ours"]
[[verify]]
title = "Show it"
command = "df -h -- {dir}"
[[examples]]
line = "team quota hit on /ckpt"
match = true
source = "ours"
[[examples]]
line = "all good"
match = false
source = "ours"
"""


def test_bad_file_is_one_line_naming_file_and_field_and_others_load(tmp_path):
    _write(tmp_path, "team.disk-full.toml", GOOD)
    _write(tmp_path, "team.bad-role.toml", GOOD.replace("team.disk-full", "team.bad-role").replace('"initiating"', '"boss"'))
    _write(tmp_path, "team.redos.toml", GOOD.replace("team.disk-full", "team.redos").replace("'team quota hit on'", "'(a)\\1 team quota'"))
    _write(tmp_path, "team.broken.toml", "schema = [")
    sigs, problems = load_pack(tmp_path)
    assert [s.id for s in sigs] == ["team.disk-full"]
    msgs = sorted(str(p) for p in problems)
    assert any(m.startswith("team.bad-role.toml: field 'role': must be one of") for m in msgs), msgs
    assert any(m.startswith("team.redos.toml: field 'patterns[0]'") for m in msgs), msgs
    assert any(m.startswith("team.broken.toml: is not valid TOML") for m in msgs), msgs
    assert all("\n" not in m for m in msgs)


def test_load_order_user_pack_overrides_builtin_and_is_marked(tmp_path):
    body = GOOD.replace("team.disk-full", "os.emfile").replace('family = "team"', 'family = "os"')
    _write(tmp_path, "os.emfile.toml", body)
    cat = load_catalog([str(tmp_path)], include_user=False)
    sig = cat.get("os.emfile")
    assert sig.title == "Team disk full" and not sig.builtin and sig.pack == str(tmp_path)


def test_signatures_check_command(tmp_path):
    _write(tmp_path, "team.disk-full.toml", GOOD)
    ok = subprocess.run([sys.executable, "-m", "denpex_tui", "signatures", "--check", str(tmp_path)],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    _write(tmp_path, "team.wrong.toml", GOOD.replace("team.disk-full", "team.wrong").replace("match = false", "match = true"))
    bad = subprocess.run([sys.executable, "-m", "denpex_tui", "signatures", "--check", str(tmp_path)],
                         capture_output=True, text=True)
    assert bad.returncode == 2
    assert "team.wrong.toml: field 'examples'" in bad.stderr


def test_the_frozen_built_in_catalog_is_the_toml_files():
    """``signatures/_parsed.json`` (the built-in files parsed at release, for a fast start) is
    of the files as they are: run ``python -m denpex_tui.core.catalog_frozen`` after editing one."""
    import tomllib

    from denpex_tui.core.catalog import BUILTIN_DIR
    from denpex_tui.core.patterns import compile_pattern
    from denpex_tui.core.catalog_frozen import frozen_tables

    files = [(p.name, p.read_bytes()) for p in sorted(BUILTIN_DIR.glob("*.toml"))]
    tables = frozen_tables(BUILTIN_DIR, files)
    assert tables is not None, "signatures/_parsed.json is out of date: python -m denpex_tui.core.catalog_frozen"
    literals = {n: t.pop("_literals") for n, t in tables.items()}
    assert tables == {n: tomllib.loads(raw.decode()) for n, raw in files}
    for n, t in tables.items():  # each pattern's prefilter literal as the pattern engine finds it
        for p in t.get("patterns", []):
            c = compile_pattern(p)
            assert literals[n][p] == [c.literal, c.ignorecase], (n, p)


def test_an_edited_built_in_file_is_read_from_its_toml(tmp_path, monkeypatch):
    """The frozen copy is used only while every file is the one it was made of."""
    import shutil

    from denpex_tui.core import catalog

    d = tmp_path / "signatures"
    shutil.copytree(catalog.BUILTIN_DIR, d)
    f = d / "os.enospc.toml"
    f.write_text(f.read_text().replace('title = "', 'title = "EDITED ', 1))
    monkeypatch.setattr(catalog, "BUILTIN_DIR", d)
    cat = catalog.load_catalog(include_user=False)
    assert cat.get("os.enospc").title.startswith("EDITED ")
    assert len(cat) == len(catalog.load_pack(d, builtin=True)[0])
