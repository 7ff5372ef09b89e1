"""Compiled Hyperscan databases are cached on disk (core.hscache): a cached one is used only
when it is the right one, and a broken or unwritable cache costs a compile, never a result."""

from __future__ import annotations

import os

import pytest

from denpex_tui.core import hscache
from denpex_tui.core.patterns import HAVE_HYPERSCAN, Prefilter

pytestmark = pytest.mark.skipif(not HAVE_HYPERSCAN, reason="Hyperscan is not installed here (x86-64 only)")

# real lines: failure-messages.md C1 and a torchrun step line from the corpus
LOG = (b"2026-11-29 17:40:16,720 INFO [rank0/4] train: step 75/200 | loss 2.31\n"
       b"OSError: [Errno 28] No space left on device: '/ckpt/global_step100/mp_rank_00_model_states.pt'\n"
       b"[rank2]: RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 263424 vs 263312\n")
LITERALS = [("No space left on device", False), ("unexpected pos", False), ("errno", True)]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("DENPEX_NO_CACHE", raising=False)
    monkeypatch.delenv("DENPEX_PREFILTER", raising=False)
    return tmp_path / "denpex"


def _files(d):
    return sorted(p.name for p in d.iterdir() if not p.name.startswith(".")) if d.exists() else []


def _no_compile(monkeypatch):
    import hyperscan

    def refuse(*a, **k):
        raise AssertionError("compiled, not loaded from the cache")

    monkeypatch.setattr(hyperscan, "Database", refuse)


def test_a_second_prefilter_loads_the_cached_database_and_finds_the_same_lines(cache, monkeypatch):
    first = Prefilter(LITERALS)
    assert first.backend == "hyperscan"
    assert len(_files(cache)) == 1
    _no_compile(monkeypatch)
    second = Prefilter(LITERALS)
    assert second.backend == "hyperscan"
    assert second.line_starts(LOG) == first.line_starts(LOG) == [LOG.index(b"OSError"), LOG.index(b"[rank2]")]


def test_other_patterns_get_their_own_database(cache):
    Prefilter(LITERALS)
    other = Prefilter(LITERALS[:1])
    assert len(_files(cache)) == 2
    assert other.line_starts(LOG) == [LOG.index(b"OSError")]


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_damaged_cache_file_is_compiled_again_and_rewritten(cache, damage):
    Prefilter(LITERALS)
    (name,) = _files(cache)
    path = cache / name
    good = path.read_bytes()
    path.write_bytes({"truncated": good[: len(good) // 3], "garbage": os.urandom(4096), "empty": b""}[damage])
    again = Prefilter(LITERALS)
    assert again.backend == "hyperscan"
    assert again.line_starts(LOG) == [LOG.index(b"OSError"), LOG.index(b"[rank2]")]
    assert path.read_bytes() == good


def test_another_databases_file_under_this_name_is_not_used(cache):
    """A file that loads but is another set's database (this set's first literal is not found
    in the probe) is compiled again."""
    Prefilter(LITERALS)
    (mine,) = _files(cache)
    Prefilter([("Traceback (most recent call last):", False)])
    (other,) = [n for n in _files(cache) if n != mine]
    (cache / mine).write_bytes((cache / other).read_bytes())
    again = Prefilter(LITERALS)
    assert again.line_starts(LOG) == [LOG.index(b"OSError"), LOG.index(b"[rank2]")]
    assert (cache / mine).read_bytes() != (cache / other).read_bytes()


def test_an_unwritable_cache_is_no_error(tmp_path, monkeypatch):
    blocker = tmp_path / "denpex"
    blocker.write_text("a file where the cache folder would be\n")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    pf = Prefilter(LITERALS)
    assert pf.backend == "hyperscan"
    assert pf.line_starts(LOG) == [LOG.index(b"OSError"), LOG.index(b"[rank2]")]
    assert blocker.read_text() == "a file where the cache folder would be\n"


def test_no_cache_writes_nothing(cache, monkeypatch):
    monkeypatch.setenv("DENPEX_NO_CACHE", "1")
    assert Prefilter(LITERALS).line_starts(LOG) == [LOG.index(b"OSError"), LOG.index(b"[rank2]")]
    assert not cache.exists()


def test_the_cache_folder_is_private(cache):
    Prefilter(LITERALS)
    assert (cache.stat().st_mode & 0o777) == 0o700


def test_only_the_most_recent_databases_are_kept(cache, monkeypatch):
    monkeypatch.setattr(hscache, "KEEP", 3)
    for i in range(5):
        Prefilter([(f"checkpoint number {i}", False)])
    assert len(_files(cache)) == 3
    newest = Prefilter([("checkpoint number 4", False)])
    assert newest.line_starts(b"x\ncheckpoint number 4\n") == [2]


def test_a_database_others_may_write_to_is_not_loaded(cache, monkeypatch):
    Prefilter(LITERALS)
    (name,) = _files(cache)
    (cache / name).chmod(0o666)
    _no_compile(monkeypatch)
    # refused: compiling is attempted (and refused here), so the prefilter falls back to RE2
    assert Prefilter(LITERALS).backend == "re2"


def test_a_cache_folder_others_may_write_to_is_not_used(cache, monkeypatch):
    Prefilter(LITERALS)
    cache.chmod(0o777)
    _no_compile(monkeypatch)
    assert Prefilter(LITERALS).backend == "re2"
