"""Compiled Hyperscan databases, kept on disk between runs.

Compiling the catalog's ~290 literals takes Hyperscan about 55 ms of CPU, on the critical path
of every big ``scan`` and history read (the pool's workers are forked after it), while loading
the same database serialized takes 0.2 ms. So a database is compiled once per set of patterns
and machine, and kept in ``$XDG_CACHE_HOME/denpex/`` (``~/.cache/denpex/``); set
``DENPEX_NO_CACHE=1`` to compile every time and write nothing.

The cache can only cost time, never change a result:

* the key is a hash of everything the compiled database depends on: the expressions, their
  flags and ids, the mode, the Hyperscan version and the CPU (its model and feature flags: a
  home directory shared by a cluster's nodes must not hand one CPU's database to another);
* a loaded database must find its own first expression in a probe scan before it is used;
* a file that cannot be read, loaded or checked is compiled again (and rewritten);
* a folder or file that is not the user's own, or that others may write to, is not used (nor
  written to);
* a cache folder that cannot be written to is no error: the run compiles, as without a cache.
  Files are written whole to a temporary name and renamed, so a concurrent reader never sees
  half a file.

Each set of patterns (a user's signature packs make others) has its own file of about 0.5 MB;
the :data:`KEEP` most recently written are kept.
"""

from __future__ import annotations

import hashlib
import os
import platform
import tempfile

__all__ = ["hyperscan_database", "cache_dir", "KEEP"]

KEEP = 16

_CPU: str | None = None


def cache_dir() -> str | None:
    """Where compiled databases are kept; None: no cache (``DENPEX_NO_CACHE``)."""
    if os.environ.get("DENPEX_NO_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "denpex")


def _ours(path: str) -> bool:
    """Whether ``path`` (the cache folder or a file in it) is this user's and no one else may
    write to it: a database is machine code's input, and only its owner may plant one."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def _cpu() -> str:
    """The CPU's model and feature flags (Linux), else the machine's name."""
    global _CPU
    if _CPU is None:
        found = {}
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
                for line in fh:
                    k, _, v = line.partition(":")
                    k = k.strip()
                    if k in ("model name", "flags", "Features") and k not in found:
                        found[k] = v.strip()
                    if not line.strip() and found:
                        break  # the first processor's block is enough
        except OSError:
            pass
        _CPU = platform.machine() + "|" + "|".join(f"{k}={v}" for k, v in sorted(found.items()))
    return _CPU


def _key(hs, mode: int, exprs: list[bytes], ids: list[int], flags: list[int]) -> str:
    h = hashlib.sha256()
    for part in (str(getattr(hs, "__version__", "?")), str(mode), _cpu(), repr(ids), repr(flags)):
        h.update(part.encode() + b"\0")
    for e in exprs:
        h.update(len(e).to_bytes(4, "little") + e)
    return h.hexdigest()[:40]


def _works(hs, db, probe: bytes, first_id: int) -> bool:
    """A scan runs (it fails on a database for another platform) and, given a probe, finds
    the first expression in it."""
    seen: list[int] = []

    def on_match(i: int, _f: int, _t: int, _fl: int, _ctx) -> None:
        seen.append(i)

    db.scan(probe or b"-", match_event_handler=on_match, scratch=hs.Scratch(db))
    return not probe or first_id in seen


def hyperscan_database(hs, exprs: list[bytes], ids: list[int], flags: list[int], probe: bytes = b""):
    """A block-mode database of ``exprs``: loaded from the cache when it holds a good one, else
    compiled (and stored). ``probe``: a text the first expression matches, checked on load
    (empty when the expressions are regular expressions: only a scan is tried)."""
    mode = hs.HS_MODE_BLOCK
    where = cache_dir()
    path = os.path.join(where, f"hs-{_key(hs, mode, exprs, ids, flags)}.db") if where else None
    if path is not None and _ours(os.path.dirname(path)) and _ours(path):
        try:
            with open(path, "rb") as fh:
                db = hs.loadb(fh.read(), mode=mode)
            if _works(hs, db, probe, ids[0]):
                return db
        except Exception:  # absent, unreadable, another CPU's, truncated, damaged: compile
            pass
    db = hs.Database(mode=mode)
    db.compile(expressions=exprs, ids=ids, elements=len(exprs), flags=flags)
    if path is not None and (not os.path.exists(os.path.dirname(path)) or _ours(os.path.dirname(path))):
        _store(path, hs.dumpb(db))
    return db


def _store(path: str, data: bytes) -> None:
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".hs-", dir=os.path.dirname(path))
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
            _prune(os.path.dirname(path))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        pass  # a read-only or full home: no cache, the next run compiles again


def _prune(folder: str) -> None:
    """Only the KEEP most recently written databases stay."""
    try:
        found = []
        for e in os.scandir(folder):
            if e.name.startswith("hs-") and e.name.endswith(".db"):
                found.append((e.stat().st_mtime, e.path))
        found.sort(reverse=True)
        for _, old in found[KEEP:]:
            os.unlink(old)
    except OSError:
        pass
