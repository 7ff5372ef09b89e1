"""A small job costs no Hyperscan compile (issue 18, scan start-up < 0.3 s).

Compiling the catalog's literals for Hyperscan costs about 35 ms of CPU, each time a matcher is
made; its faster scan pays that back only over tens of MB. A scan of a few MB (and the first-warning
search, which matches lines one by one and never uses the prefilter) uses RE2, which finds the same
lines (tests/test_patterns.py): the diagnosis is the same with either."""

from __future__ import annotations

import pytest

from denpex_tui.core import patterns
from denpex_tui.core.scan import scan_paths
from tests.helpers import CORPUS

CASE = CORPUS / "enospc_checkpoint_fastfail"


def _compiles(monkeypatch) -> list[int]:
    made: list[int] = []
    real = patterns._hs.Database

    class Counting(real):  # type: ignore[misc, valid-type]
        def compile(self, *a, **kw):
            made.append(1)
            return super().compile(*a, **kw)

    monkeypatch.setattr(patterns._hs, "Database", Counting)
    return made


@pytest.mark.skipif(not patterns.HAVE_HYPERSCAN, reason="Hyperscan is not installed here")
def test_a_small_job_is_scanned_without_compiling_hyperscan(monkeypatch):
    monkeypatch.delenv("DENPEX_PREFILTER", raising=False)
    made = _compiles(monkeypatch)
    r = scan_paths([str(CASE)], include_user=False, jobs=1)
    assert r.incidents and r.incidents[0].initiating.rank == 2
    assert r.backend == "re2"
    assert made == []  # neither the scan's matcher nor the first-warning search compiled one


@pytest.mark.skipif(not patterns.HAVE_HYPERSCAN, reason="Hyperscan is not installed here")
def test_the_small_job_diagnosis_is_the_same_with_hyperscan(monkeypatch):
    monkeypatch.delenv("DENPEX_PREFILTER", raising=False)
    small = scan_paths([str(CASE)], include_user=False, jobs=1)
    monkeypatch.setattr(patterns, "HYPERSCAN_WORTH", 0)
    monkeypatch.setattr("denpex_tui.core.scan.HYPERSCAN_WORTH", 0)
    big = scan_paths([str(CASE)], include_user=False, jobs=1)
    assert big.backend == "hyperscan"
    assert small.to_json() == big.to_json()


def test_a_scan_start_reads_no_toml_and_forks_nothing(tmp_path):
    """The start-up's fixed costs are paid only when needed: the built-in catalog comes from its
    frozen copy (no ``tomllib``: 144 files parsed in pure Python were a third of the catalog's
    load, ``core/catalog_frozen.py``), no version specifier is parsed, no pattern is compiled
    before its first search, and a small job loads no process pool."""
    import subprocess
    import sys

    log = tmp_path / "rank0.log"
    log.write_text("[rank0]: step 60 loss 2.31\n")
    code = (
        "import io, sys\n"
        "import denpex_tui.commands.cli as cli\n"
        "from denpex_tui.core import patterns\n"
        "made, engine = [], patterns._engine\n"
        "patterns._engine = lambda p: made.append(p) or engine(p)\n"
        "cli.detached = lambda fn: fn()\n"
        "out, sys.stdout = sys.stdout, io.StringIO()\n"
        "cli.main(['scan', '--no-measure', sys.argv[1]])\n"
        "sys.stdout = out\n"
        "print(sorted(m for m in ('tomllib', 'packaging.specifiers', 'concurrent.futures.process') if m in sys.modules))\n"
        "print(len(made))\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    assert r.returncode == 0, r.stderr
    loaded, compiled = r.stdout.split("\n")[:2]
    assert loaded == "[]"
    assert int(compiled) < 20  # of about 230: only those whose literal a line of the log has
