"""From a path a training log names to the directory Denpex watches for it.

A save path becomes its save directory (not the per-step tag directory that rotation
deletes), an error's file its directory, an error file of torchelastic its log dir
(``transform``).  A relative path is resolved against the log file's directory and its
parents (torchrun's ``--log-dir`` files are ``<cwd>/<log_dir>/<run>/attempt_N/<rank>/stdout.log``),
then the current directory; a directory that does not exist here is watched through its
nearest existing ancestor (``resolve_dir``).  Every stat of a log-derived path goes through
the bounded worker: a dead mount never hangs the probes.
"""

from __future__ import annotations

import os
import re

from denpex_tui.core import bounded

__all__ = ["transform", "resolve_dir", "abs_named"]

_STEP_DIR = re.compile(r"^(?:checkpoint[-_]\d+|global_step\d+|iter_\d+|step[-_]?\d+|epoch[-_=]?\d+.*)$")



def _looks_like_file(p: str) -> bool:
    return "." in os.path.basename(p.rstrip("/"))


_ELASTIC_LAYOUT = re.compile(r"^(?P<logdir>.*)/[^/]+/attempt_\d+/\d+/[^/]+$")


def _bases(log: str) -> list[str]:
    """Directories a relative path in ``log`` may be relative to, most likely first."""
    alog = os.path.abspath(log)
    d = os.path.dirname(alog)
    out = []
    m = _ELASTIC_LAYOUT.match(alog)
    if m:
        # <cwd>/<log_dir>/<run_id>_xxx/attempt_N/<local_rank>/stdout.log: with the usual
        # relative --log-dir, the worker's cwd is the log dir's parent
        out.append(os.path.dirname(m.group("logdir")))
    for _ in range(6):
        if d not in out:
            out.append(d)
        nd = os.path.dirname(d)
        if nd == d:
            break
        d = nd
    cwd = os.getcwd()
    if cwd not in out:
        out.append(cwd)
    return out


def _isdir(p: str) -> bool:
    """A log-derived path: stat it through the bounded worker; one that does not answer is
    not there for us (probe's reading of it then says "did not answer in N s")."""
    return bool(bounded.isdir(p))


def _existing_ancestor(p: str) -> str:
    q = p
    while not _isdir(q):
        nq = os.path.dirname(q)
        if nq == q:
            return q
        q = nq
    return q


def resolve_dir(d: str, log: str) -> tuple[str, bool, str]:
    """(directory to watch, exists, wanted absolute dir)."""
    d = os.path.expanduser(d)
    if os.path.isabs(d):
        want = os.path.normpath(d)
        if _isdir(want):
            return want, True, want
        return _existing_ancestor(want), False, want
    bases = _bases(log)
    for b in bases:
        cand = os.path.normpath(os.path.join(b, d))
        if _isdir(cand):
            return cand, True, cand
    # not here in full: prefer the base where its first component exists
    first = os.path.normpath(d).split(os.sep, 1)[0]
    base = bases[0]
    if first not in (".", ".."):
        for b in bases:
            if bounded.exists(os.path.join(b, first)):
                base = b
                break
    want = os.path.normpath(os.path.join(base, d))
    return _existing_ancestor(want), False, want


def transform(raw: str, how: str) -> str | None:
    p = raw.strip().rstrip(",;")
    if not p or p in ("None", "<N/A>"):
        return None
    if how == "file->savedir":
        tag = os.path.dirname(p)
        return os.path.dirname(tag) or tag or "."
    if how == "dir->savedir":
        p = p.rstrip("/")
        if _STEP_DIR.match(os.path.basename(p)):
            return os.path.dirname(p) or "."
        return p
    if how == "file->dir":
        return os.path.dirname(p) or "."
    if how == "errfile":
        m = re.match(r"^(.*)/attempt_\d+/\d+/error\.json$", p)
        if m:
            return m.group(1) or "."
        return os.path.dirname(p) or "."
    if how == "oserror":
        if _looks_like_file(p):
            return os.path.dirname(p) or "."
        return p
    return p


def abs_named(raw: str, log: str) -> str:
    if raw.startswith("<") or os.path.isabs(raw):
        return raw
    d = os.path.dirname(raw)
    base, _exists, want = resolve_dir(d or ".", log)
    return os.path.normpath(os.path.join(want if not _exists else base, os.path.basename(raw)))
