"""The fix panel's content for an incident: cause, fix, checklist, verification commands.

Values for the command placeholders come from the incident and the job's own lines: the path
named in the error (``[Errno 28] ...: '/ckpt/x.pt'``), the checkpoint directory from save lines,
DeepSpeed's ``nvme_path``, the pid from the launcher report, the log file holding the line.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from dataclasses import dataclass, field
from typing import Any

from .catalog import Catalog, Signature
from .commands import RenderedCommand, render_command
from .job import JobState
from .jobdir import job_dir, resolve
from .model import Finding

__all__ = ["FixPanel", "ChecklistRow", "fix_panel", "incident_values"]

_QUOTED_PATH = re.compile(r"""(?:'|")(/[^'"]{1,4095}|\.{1,2}/[^'"]{1,4095})(?:'|")""")
_ON_PATH = re.compile(r"failed on (\S+)|file </([^>]+)>|(?:to|from) (/\S+)|checkpoint: (\S+)")
_NVME = re.compile(r"nvme_path(?:=PosixPath\(|['\"]?\s*[:=]\s*)['\"]?(/[^'\",)\s]+)")
_SWAP = re.compile(r"swap_folder \.+ (/\S+)")


@dataclass
class ChecklistRow:
    text: str
    condition: str | None
    status: str  # "true" | "false" | "not measurable here" | "manual"
    measured: dict[str, Any] = field(default_factory=dict)
    command: RenderedCommand | None = None  # the denpex command that answers the item


@dataclass
class FixPanel:
    signature: Signature | None
    cause: str
    fix: list[str]
    checklist: list[ChecklistRow]
    commands: list[RenderedCommand]
    siblings: list[tuple[str, str]]
    values: dict[str, Any]
    affected: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "signature": self.signature.id if self.signature else None,
            "cause": self.cause,
            "fix": self.fix,
            "checklist": [
                {"text": c.text, "condition": c.condition, "status": c.status, "measured": c.measured,
                 **({"command": c.command.to_json()} if c.command else {})}
                for c in self.checklist
            ],
            "commands": [c.to_json() for c in self.commands],
            "siblings": [{"id": i, "evidence": e} for i, e in self.siblings],
            "affected_version": self.affected,
        }


def _path_from_text(text: str) -> str | None:
    m = _QUOTED_PATH.search(text)
    if m:
        return m.group(1)
    m = _ON_PATH.search(text)
    if m:
        p = next(g for g in m.groups() if g)
        if m.group(2):
            return "/dev/shm"
        return p.rstrip(".,;:")
    return None


def incident_values(finding: Finding | None, job: JobState | None,
                    process_cwd: tuple[int, str] | None = None) -> dict[str, Any]:
    """Placeholder values for one finding (untrusted: rendering refuses and quotes them)."""
    v: dict[str, Any] = {}
    if finding is None:
        return v
    v["log"] = finding.path or None
    v["rank"] = finding.rank
    v["node"] = finding.node
    v["line"] = finding.line or None
    # The detector read the path once (the errno detector's ``path`` field); the text is a
    # fallback for catalog signatures that declare no named group.
    path = finding.fields.get("path") or _path_from_text(finding.text)
    if job is not None:
        nvme = None
        saves = []
        for m in job.markers():
            if nvme is None:
                mm = _NVME.search(m.text) or _SWAP.search(m.text)
                if mm:
                    nvme = mm.group(1)
            if "checkpoint" in m.signature or "save" in m.signature:
                p = _path_from_text(m.text) or _last_path_word(m.text)
                if p:
                    saves.append((m, p))
        # The save the failure is about: the latest one announced before it (by the same rank
        # when that rank announces saves), else the latest at all.
        ft = finding.time.replace(tzinfo=None) if finding.time else None

        def when(mp):
            t = mp[0].time
            return t.replace(tzinfo=None) if t else None

        before = [mp for mp in saves if ft is None or when(mp) is None or when(mp) <= ft] or saves
        mine = [mp for mp in before if mp[0].rank == finding.rank] or before
        ckpt = None
        if mine:
            ckpt = max(enumerate(mine), key=lambda im: (when(im[1]) or datetime.min, im[0]))[1][1]
        if ckpt:
            v["ckpt_dir"] = ckpt if _looks_dir(ckpt) else os.path.dirname(ckpt) or ckpt
        if nvme:
            v["nvme_path"] = nvme
        for fe in job.failure_entries():
            if fe.rank == finding.rank and fe.pid is not None and fe.attempt == finding.attempt:
                v["pid"] = fe.pid
    v["signature"] = finding.signature
    if job is not None:  # the folder holding the job's logs, for the checklist's denpex commands
        paths = [s.path for s in job.sources()]
        if paths:
            try:
                root = os.path.commonpath([os.path.abspath(p) for p in paths])
            except ValueError:
                root = None
            if root:
                v["job"] = root if len(paths) > 1 or os.path.isdir(root) else os.path.dirname(root)
            ranks = {r for s in job.sources() for r in s.ranks}
            if ranks:
                v["world_size"] = len(ranks)
    if path and "/zero_stage_3/" in path and not v.get("nvme_path"):
        # DeepSpeed's swap layout: <nvme_path>/zero_stage_3/<kind>/rank<N>/<id>.tensor.swp
        v["nvme_path"] = path.split("/zero_stage_3/", 1)[0] or "/"
    if path:
        v["path"] = path
        v["dir"] = path if path.endswith("/") or path == "/dev/shm" else (os.path.dirname(path) or ".")
    elif v.get("ckpt_dir"):
        v["path"] = v["dir"] = v["ckpt_dir"]
    _resolve_relative(v, finding, job, process_cwd)
    return v


def _resolve_relative(v: dict[str, Any], finding: Finding, job: JobState | None, process_cwd) -> None:
    """Relative paths of the logs against the job's working directory (core/jobdir.py), never
    the user's; ``v['relative']`` says what was done (or that the directory is unknown)."""
    where = job_dir(finding.path, finding.node, job.sources() if job is not None else (), process_cwd)
    done, left = [], []
    for k in ("path", "dir", "ckpt_dir", "nvme_path"):
        p, resolved = resolve(v.get(k), where)
        if resolved is True:
            done.append(v[k])
            v[k] = p
        elif resolved is False:
            left.append(v[k])
    note = where.note(list(dict.fromkeys(done)), list(dict.fromkeys(left)))
    if note:
        v["relative"] = note
        v["job_dir_known"] = not left


def _looks_dir(p: str) -> bool:
    return p.endswith("/") or not os.path.splitext(p)[1]


def _last_path_word(text: str) -> str | None:
    for w in reversed(text.split()):
        if w.startswith("["):  # a log's own tag ([rank5/8], [1,0]<stdout>), not a path
            continue
        w = w.strip("'\",.;:()")
        if "/" in w:
            return w
    return None


def fix_panel(
    finding: Finding | None,
    catalog: Catalog,
    job: JobState | None = None,
    metrics: dict[str, float | None] | None = None,
    process_cwd: tuple[int, str] | None = None,
) -> FixPanel:
    """``process_cwd``: (pid, cwd) of the finding's rank's process, when a probe read it: the
    directory a relative path in its logs is relative to."""
    sig = catalog.get(finding.signature) if finding else None
    values = incident_values(finding, job, process_cwd)
    if sig is None:
        return FixPanel(None, "No known signature.", [], [], [], [], values)
    rows = []
    for item in sig.checklist:
        cmd = (render_command(item.text, item.command, values, builtin=sig.builtin, pack=sig.pack)
               if item.command else None)
        if item.parsed is None:
            rows.append(ChecklistRow(item.text, None, "manual", command=cmd))
            continue
        res = item.parsed.evaluate(metrics or {}) if metrics is not None else None
        measured = {}
        if metrics:
            for name in item.parsed.metrics:
                measured[name] = metrics.get(name)
        status = "not measurable here" if res is None else ("true" if res else "false")
        rows.append(ChecklistRow(item.text, item.condition, status, measured, cmd))
    cmds = [
        render_command(c.title, c.command, values, builtin=sig.builtin, pack=sig.pack) for c in sig.verify
    ]
    affected = sig.affected(job.versions()) if job is not None else None
    return FixPanel(
        signature=sig,
        cause=sig.cause,
        fix=list(sig.fix),
        checklist=rows,
        commands=cmds,
        siblings=[(s.id, s.evidence) for s in sig.siblings],
        values=values,
        affected=affected,
    )
