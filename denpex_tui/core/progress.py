"""How far a rank got: the training step and the checkpoint saves its own log shows.

Read from the lines themselves (one pass, bounded memory), for ``verify`` (did the rerun get as
far as the failure?), ``evidence`` (the step at the failure) and the failure's rhythm (how many
saves each rank completed before it failed). Step lines, as printed by the trainers:

* ``step 100/200``, ``global_step60``, ``global step 1200`` (Lightning), ``step=10, skipped=0``
  (DeepSpeed's ``steps_per_print``), Megatron's `` iteration      100/  500000 |`` and
  ``iter_0000100``, HF ``checkpoint-500``;

save lines (failure-messages.md 2.B, 2.H): a save *starts* with ``Saving checkpoint``,
``[Torch] Checkpoint <tag> is about to be saved!`` (B4), ``saving checkpoint at iteration``
(H1), ``Saving model checkpoint to`` (H6), ``Saving current state to`` (H7); it *completes*
with ``Checkpoint <tag> is ready now!`` (B7), ``successfully saved checkpoint`` (H2),
``Copying complete!`` (A10), ``saving model to '...ckpt'`` (H11) or a ``saved``/``Saved``
checkpoint line. Several lines of one save (DeepSpeed's and the script's) count once: saves are
keyed by the step they name (or the last step seen).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Progress", "read_progress", "STEP"]

STEP = re.compile(
    r"(?:\bglobal[_ ]step[ =:]?|\bstep[ =:]+|\bstep_0*|\biteration[ =:]+|\biter_0*|\bcheckpoint-)(\d{1,12})\b", re.I)
SAVE_START = re.compile(
    r"\bsaving checkpoint\b|is about to be saved|\bSaving model checkpoint to\b|\bSaving current state to\b", re.I)
SAVE_DONE = re.compile(
    r"is ready now!|successfully saved checkpoint|Copying complete!|\bsaved checkpoint\b|\bcheckpoint\b\S*\s+(?:\S+\s+)?saved\b"
    r"|saving model to '[^']*\.ckpt'", re.I)
_NOT_DONE = re.compile(r"\bfail|\berror\b|\bnot\b", re.I)
_MAX_LINE = 64 << 10


@dataclass
class Progress:
    path: str
    last_step: int | None = None
    last_step_line: int | None = None
    saves_started: list[int] = field(default_factory=list)  # keys (steps) in order
    saves_done: list[int] = field(default_factory=list)
    lines: int = 0

    @property
    def saves_completed(self) -> int:
        if self.saves_done:
            return len(self.saves_done)
        # a framework that prints only the start: a save counts once a later step was reached
        return len([k for k in self.saves_started if self.last_step is not None and self.last_step > k])

    def to_json(self) -> dict:
        return {"path": self.path, "last_step": self.last_step, "last_step_line": self.last_step_line,
                "saves_started": len(self.saves_started), "saves_completed": self.saves_completed}


def _steps(text: str) -> list[int]:
    return [int(m.group(1)) for m in STEP.finditer(text)]


def read_progress(path: str, stop_line: int | None = None) -> Progress:
    """Progress of one file, up to (not including) ``stop_line`` when given."""
    p = Progress(path)
    started: dict[int, None] = {}
    done: dict[int, None] = {}
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            if stop_line is not None and n >= stop_line:
                break
            p.lines = n
            text = raw[:_MAX_LINE].decode("utf-8", "replace")
            steps = _steps(text)
            is_start = SAVE_START.search(text) is not None
            is_done = not is_start and SAVE_DONE.search(text) is not None and not _NOT_DONE.search(text)
            key = steps[-1] if steps else p.last_step
            if steps and not (is_start or is_done):
                p.last_step, p.last_step_line = max(steps[-1], p.last_step or 0), n
            elif steps and p.last_step is None:
                p.last_step, p.last_step_line = steps[-1], n
            if is_start and key is not None:
                started.setdefault(key)
            if is_done and key is not None:
                done.setdefault(key)
    p.saves_started = list(started)
    p.saves_done = list(done)
    return p
