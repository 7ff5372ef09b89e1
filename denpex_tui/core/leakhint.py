"""With logs alone: which measurement tells a full disk from deleted checkpoints held open.

An ENOSPC while saving a checkpoint reads the same whether the disk is full of checkpoints or
full of *deleted* checkpoints a writer still holds open: DeepSpeed's FastFileWriter fd leak
(0.17.1 to 0.19.0 with ``checkpoint.writer``; deepspeedai/DeepSpeed#8003, fixed in 0.19.1), or any
writer that never closes what rotation deletes. The logs cannot tell them apart; a measurement on
the node can, while the trainer is still running: its ``(deleted)`` fds and ``df`` against ``du``
of the checkpoint directory. :func:`leak_question` says so on the incident, with the commands
(built by :mod:`.commands`: every value shell-quoted, a missing one left as ``<name>``), and keeps
the leak as a competing hypothesis. The DeepSpeed version the logs print, when they print one,
says whether the leak can be this one. With readings (live probes or an evidence bundle), the
probes decide instead (:mod:`denpex_tui.probes.leak`).
"""

from __future__ import annotations

import os

from .commands import DELETED_OPEN_TEMPLATE, render_command
from .model import Finding

__all__ = ["leak_question", "LEAK_ID"]

LEAK_ID = "deepspeed.fastfilewriter-fd-leak"
_SPACE = frozenset({"os.enospc", "torch.save-write-failed", "hf.safetensors-serialize-error", "deepspeed.aio-file-error",
                    "deepspeed.nvme-checkpoint-copy", "deepspeed.decoupled-checkpoint-failed"})


def _ds_version(versions: dict) -> tuple[int, ...] | None:
    v = str(versions.get("deepspeed") or "")
    parts = []
    for p in v.split(".")[:3]:
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) if parts else None


def leak_question(init: Finding, versions: dict, ckpt_dir: str | None = None) -> tuple[str, dict] | None:
    """(evidence, hypothesis) for an ENOSPC-class failure during a checkpoint save, or None.
    ``ckpt_dir``: the checkpoint directory the job's save lines name, when the error names none."""
    if init.signature not in _SPACE and str(init.fields.get("errname") or "") != "ENOSPC":
        return None
    if init.signature == LEAK_ID or init.phase not in ("checkpoint-save", "any"):
        return None
    path = str(init.fields.get("path") or "")
    d = os.path.dirname(path) if path and not path.endswith("/") else path.rstrip("/")
    vals = {"dir": d or ckpt_dir or None, "pid": None}
    cmds = [render_command("check", "ls -l /proc/{pid}/fd | grep -c '(deleted)'", vals).text,
            render_command("check", DELETED_OPEN_TEMPLATE, vals).text,
            render_command("check", "df -h -- {dir} && du -sh -- {dir}", vals).text]
    v = _ds_version(versions)
    if v is not None and (0, 17, 1) <= v < (0, 19, 1):
        ds = f"DeepSpeed {versions['deepspeed']} is in the range whose FastFileWriter leaks (0.17.1-0.19.0); "
    elif v is not None:
        ds = f"DeepSpeed {versions['deepspeed']} is outside the FastFileWriter leak's range (0.17.1-0.19.0); another "
    else:
        ds = ""
    evidence = (f"with logs alone a full disk cannot be told from deleted checkpoints still held open ({ds}a writer "
                "that keeps rotated-away files open fills the disk the same way): what decides is measured on that "
                "node while the trainer runs, its deleted-but-open fds and df against du of the checkpoint dir: "
                + "  ;  ".join(cmds) + "  (or denpex probe / watch there, which measure both)")
    hyp = {"signature": LEAK_ID, "rank": init.rank, "path": init.path, "line": init.line, "time": None,
           "text": init.text[:300],
           "rule": "not decidable from logs: deleted-but-open checkpoint files and the df/du gap decide"}
    return evidence, hyp
