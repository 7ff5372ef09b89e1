"""Where a relative path in the logs is relative to: the job's working directory.

A trainer prints ``./checkpoints/rank3/step_90`` relative to its own working directory, not to
wherever the user runs Denpex. That directory is known when the logs tell it: torchrun's
per-rank files sit at ``<cwd>/<--log-dir>/<run>/attempt_N/<local rank>/std*.log`` (the usual
``--log-dir logs``: the log dir's parent is where the workers ran), or a watched training
process gives its own cwd. Otherwise it is unknown, and everything that prints the path says so
instead of resolving it against the user's current directory.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

__all__ = ["JobDir", "job_dir", "resolve"]

_ELASTIC = re.compile(r"^(?P<logdir>.+)/[^/]+/attempt_\d+/\d+/(?:stdout|stderr)\.log$")


@dataclass(frozen=True)
class JobDir:
    path: str | None  # None: the logs do not say
    how: str  # "the parent of torchrun's --log-dir", "process 4123's cwd", or why unknown

    def note(self, resolved: list[str], unresolved: list[str]) -> str | None:
        if unresolved:
            return (f"{', '.join(unresolved)}: relative in the logs, and the job's working directory is not in "
                    "them: the paths and the commands below are as the logs give them, to run in that directory")
        if resolved:
            return f"{', '.join(resolved)}: relative in the logs, resolved against {self.path} ({self.how})"
        return None


def job_dir(log_path: str | None, node: str | None = None, sources=(), process_cwd: tuple[int, str] | None = None
            ) -> JobDir:
    """The working directory of the job that wrote ``log_path``: a process's own cwd when one
    is given (``(pid, cwd)``), else the torchrun layout of that file or of another file of the
    same node."""
    if process_cwd is not None and process_cwd[1]:
        return JobDir(os.path.normpath(process_cwd[1]), f"process {process_cwd[0]}'s working directory")
    cands = [log_path] if log_path else []
    cands += [s.path for s in sources if getattr(s, "node", None) == node and s.path != log_path]
    for p in cands:
        m = _ELASTIC.match(os.path.abspath(p))
        if m:
            return JobDir(os.path.dirname(m.group("logdir")), "the parent of torchrun's --log-dir")
    return JobDir(None, "not in these logs")


def resolve(path: str | None, where: JobDir) -> tuple[str | None, bool | None]:
    """(path, resolved): an absolute path as it is (None: nothing to resolve), a relative one
    joined to the job's directory (True) or left as the logs give it (False)."""
    if not path or os.path.isabs(path) or path.startswith(("<", "~")):
        return path, None
    if where.path is None:
        return path, False
    return os.path.normpath(os.path.join(where.path, path)), True
