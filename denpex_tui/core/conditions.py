"""Checklist conditions: ``<metric> <op> <number>`` clauses joined by `` and `` (docs/signature-format.md).

``parse_condition(text)`` validates (the catalog loader calls it on every file) and raises
``ValueError`` with a one-line message; nothing is ever evaluated as code. ``Condition.evaluate``
uses three-valued logic: a clause whose metric was not measured is ``None`` (unknown); ``and`` is
False as soon as one clause is False, else None if any clause is unknown, else True.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from typing import Callable, Mapping

METRICS: dict[str, str] = {
    "path.bytes_free_pct": "free bytes for unprivileged writers (f_bavail) in % of total",
    "path.inodes_free_pct": "free inodes (f_favail) in % of total",
    "path.bytes_reserved_pct": "root-reserved blocks in % of total (f_bfree - f_bavail)",
    "path.df_du_gap_pct": "bytes used per df not reachable under the path (deleted-but-open), % of total",
    "proc.fd_used_pct": "open fds in % of the process's soft RLIMIT_NOFILE",
    "proc.deleted_open_bytes": "bytes held by deleted-but-open regular files of the process",
    "proc.fd_growth_per_save": "fds opened and not closed per checkpoint save",
    "shm.bytes_free_pct": "/dev/shm free bytes in %",
}

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}

_CLAUSE = re.compile(
    r"([A-Za-z_][A-Za-z0-9_.]*)[ \t]*(<=|>=|==|!=|<|>)[ \t]*"
    r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
)
_AND = re.compile(r"[ \t]+and[ \t]+")
MAX_LEN = 500


@dataclass(frozen=True)
class Clause:
    metric: str
    op: str
    value: float

    def evaluate(self, metrics: Mapping[str, float | int | None]) -> bool | None:
        v = metrics.get(self.metric)
        if v is None or isinstance(v, bool):
            return None
        try:
            v = float(v)
        except (TypeError, ValueError):
            return None
        if math.isnan(v):
            return None
        return _OPS[self.op](v, self.value)

    def __str__(self) -> str:
        num = int(self.value) if self.value.is_integer() else self.value
        return f"{self.metric} {self.op} {num}"


@dataclass(frozen=True)
class Condition:
    text: str
    clauses: tuple[Clause, ...]

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.metric for c in self.clauses))

    def evaluate(self, metrics: Mapping[str, float | int | None]) -> bool | None:
        """True / False, or None when it cannot be decided from these readings."""
        unknown = False
        for c in self.clauses:
            r = c.evaluate(metrics)
            if r is False:
                return False
            if r is None:
                unknown = True
        return None if unknown else True

    def __str__(self) -> str:
        return " and ".join(str(c) for c in self.clauses)


def _short(text: str) -> str:
    t = text if len(text) <= 60 else text[:57] + "..."
    return repr(t)


def parse_condition(text: str) -> Condition:
    """Parse ``metric op number [and metric op number ...]``; ValueError (one line) if invalid."""
    if not isinstance(text, str):
        raise ValueError(f"condition must be a string, not {type(text).__name__}")
    if len(text) > MAX_LEN:
        raise ValueError(f"condition is longer than {MAX_LEN} characters")
    if any(ord(ch) < 32 and ch != "\t" for ch in text):
        raise ValueError(f"condition {_short(text)}: contains a control character")
    body = text.strip(" \t")
    if not body:
        raise ValueError("condition is empty")
    parts = _AND.split(body)
    clauses = []
    for part in parts:
        if not part:
            raise ValueError(f"condition {_short(text)}: empty clause around 'and'")
        m = _CLAUSE.fullmatch(part)
        if m is None:
            raise ValueError(
                f"condition {_short(text)}: clause {_short(part)} is not "
                "'<metric> <op> <number>' (op one of < <= > >= == !=)"
            )
        metric, op, num = m.groups()
        if metric not in METRICS:
            raise ValueError(
                f"condition {_short(text)}: unknown metric {metric!r} "
                f"(known: {', '.join(METRICS)})"
            )
        value = float(num)
        if not math.isfinite(value):
            raise ValueError(f"condition {_short(text)}: number {num!r} is not finite")
        clauses.append(Clause(metric, op, value))
    return Condition(text=text, clauses=tuple(clauses))


__all__ = ["METRICS", "Clause", "Condition", "parse_condition"]
