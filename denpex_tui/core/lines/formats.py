"""The registry of launcher and log prefix formats (one data entry per format).

Each :class:`PrefixFormat` is one launcher's or log library's line prefix: a regular
expression matched at the current position, whose named groups say what it tells (``host``,
``pid``, ``task``, ``rank``, ``local_rank``, ``device``, ``role_name``, ``lvl``), and real
example lines that run as tests. Launchers stack prefixes (``c000001: [default3]:[rank3]: ...``,
``  0: [rank0]: ...``), so the registry is tried again after each match until none applies
(:func:`denpex_tui.core.lines.facts.line_facts` does that). Inside the text, ``[Rank N]``
(DeepSpeed, c10d), ``[RANK N]``, ``[rank: N]`` (Lightning) and ``[rankN/M]`` (a trainer's own
log format) name a global rank too.

A number is a rank, pid or device only when it is in a sane range (at most 7 digits): a
``[rank<4301 digits>]:`` line is text, never an overflow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

LineFacts = Any  # the door's LineFacts (facts.py); named here for the signatures only

__all__ = ["PrefixFormat", "FORMATS", "TEXT_RANK", "MAX_PREFIX_ROUNDS", "LEADING", "apply_groups",
           "compile_prefix_template", "set_prefix_template", "active_formats", "first_format", "small_int"]

MAX_PREFIX_ROUNDS = 6
_N = r"\d{1,7}"  # a rank, pid, task or device: at most 7 digits


@dataclass(frozen=True)
class PrefixFormat:
    """One launcher/log prefix: ``rx`` is matched at the current position and its named groups
    (``host``, ``pid``, ``task``, ``rank``, ``local_rank``, ``device``, ``role_name``, ``lvl``,
    ``ts``) are what it tells; ``strip`` says whether the matched text is removed."""

    name: str
    rx: re.Pattern[str]
    examples: tuple[str, ...]
    guard: Callable[[LineFacts, re.Match[str]], bool] | None = None  # False: not this format after all
    strip: bool = True
    once: bool = True  # may match only once per line
    first_only: bool = False  # only at the very start of the line


def small_int(s: str | None) -> int | None:
    if s is None or len(s) > 7:
        return None
    return int(s)


_NUMERIC_GROUPS = ("pid", "task", "rank", "local_rank", "device")
_TEXT_GROUPS = ("host", "role_name")
_GLOG_LEVEL = {"D": "debug", "I": "info", "W": "warning", "E": "error", "F": "critical"}


def apply_groups(p: LineFacts, m: re.Match[str]) -> bool:
    """Copy a format's named groups into the line: numbers only in range, ``lvl`` as a glog
    level letter (a timestamp is the time rule's: :mod:`denpex_tui.core.lines.times`)."""
    d = m.groupdict()
    for k in _NUMERIC_GROUPS:
        if d.get(k) is not None:
            setattr(p, k, small_int(d[k]))
    for k in _TEXT_GROUPS:
        if d.get(k) is not None:
            setattr(p, k, d[k])
    if d.get("lvl"):
        p.level = _GLOG_LEVEL[d["lvl"]]
    return True


def _not_a_word(p: LineFacts, m: re.Match[str]) -> bool:
    return not _NOT_HOST.fullmatch(m.group("host"))


def _not_rank(p: LineFacts, m: re.Match[str]) -> bool:
    return m.group("role_name").lower() != "rank"


# Words that look like a host before ": " but are not one (exceptions, levels, log words).
_NOT_HOST = re.compile(
    r"(?i)[\w.]*(?:error|exception|warning|interrupt|exit|fault)\d*|rank\d+|default\d+|step\d+|epoch\d+|"
    r"iter(?:ation)?\d+|gpu\d+|cuda\d*|nccl\w*|python\d[\w.]*|torch\w*|http\w*|line\d+"
    r"|mlx\d+|ucx\w*|ib\w*\d+|eth\d+|ena\d*|nvrm\w*|hfi\d+"  # device drivers' own labels
)

FORMATS: tuple[PrefixFormat, ...] = (
    PrefixFormat(
        "kubectl",
        re.compile(r"\[pod/(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{0,252})/(?P<container>[A-Za-z0-9][A-Za-z0-9._-]{0,62})\] "),
        ("[pod/llama-train-worker-1/pytorch] [rank1]: Traceback (most recent call last):",),
        first_only=True,
    ),
    PrefixFormat(
        "nccl",
        re.compile(
            r"(?:\[(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?)\] )?"
            rf"(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{{0,62}}):(?P<pid>{_N}):(?P<tid>{_N}) \[(?P<device>{_N})\] "
            r"(?=(?:\[\d+\] )?(?:[\w./-]+:\d+ (?:\(\w+\) )?)?NCCL )"
        ),
        (
            "node-1:185:1027 [7] NCCL INFO [Service thread] Connection closed by localRank 0",
            "gpu-st-p4d-24xlarge-60:1180:1246 [0] transport/net_ib.cc:1328 NCCL WARN NET/IB : Got completion",
        ),
    ),
    PrefixFormat(
        "mpirun",
        re.compile(rf"\[(?:(?P<job>{_N}),)?(?P<rank>{_N})\]<(?:stdout|stderr|stddiag)>: ?"),
        ("[1,0]<stderr>:Traceback (most recent call last):", "[3]<stdout>:Epoch 1 step 10"),
    ),
    PrefixFormat(
        "openmpi",
        re.compile(rf"\[(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{{0,62}}):(?P<pid>{_N})\] "),
        ("[dsw-541920-5fd5c64bc4-m25b4:02519] Signal: Segmentation fault (11)",),
        first_only=True,
    ),
    PrefixFormat(
        "pdsh",
        re.compile(r"(?P<host>localhost|[A-Za-z][A-Za-z0-9._-]{0,62}?\d[A-Za-z0-9._-]{0,62}|[a-z][a-z0-9_]*-[a-z0-9_-]+): (?=\s*\S)"),
        ("c000001: [rank0]: Traceback (most recent call last):", "worker-1: [2024-01-01 10:00:00,000] [INFO] x"),
        guard=_not_a_word,
    ),
    PrefixFormat(
        "srun-label",
        re.compile(rf" {{0,6}}(?P<task>{_N}): (?=\S)"),
        ("  5: [rank5]: Traceback (most recent call last):", "0: RuntimeError: CUDA error: out of memory"),
    ),
    PrefixFormat(
        "torch-rank",
        re.compile(rf"\[rank(?P<rank>{_N})\]: ?"),
        ("[rank2]: RuntimeError: basic_ios::clear: iostream error",),
        once=False,
    ),
    PrefixFormat(
        "torchrun-tee",
        re.compile(rf"\[(?P<role_name>[A-Za-z_][A-Za-z_-]{{0,62}}?)(?P<local_rank>{_N})\]: ?"),
        ("[default2]:[rank2]: RuntimeError: basic_ios::clear: iostream error",),
        guard=_not_rank,
        once=False,
    ),
    PrefixFormat(
        "glog",
        re.compile(
            r"\[?(?P<lvl>[DIWEF])(?P<mo>[01]\d)(?P<dd>[0-3]\d) (?P<t>\d\d:\d\d:\d\d(?:\.\d{1,9})?)"
            rf"(?: +(?P<pid>{_N}))? (?P<file>[^\]\s]{{1,300}}:\d{{1,7}})\] ?"
        ),
        (
            "E0731 10:50:08.043000 3247964 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1)",
            "[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective operation timeout",
        ),
        strip=False,  # the message keeps its header: the time is read from it below
    ),
    PrefixFormat(
        "glog-short",
        re.compile(r"\[(?P<lvl>[DIWEF]) (?P<file>[\w./-]{1,200}:\d{1,7})\] "),
        ("[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout",),
        strip=False,
    ),
)

# In-text rank markers (not prefixes): DeepSpeed/c10d "[Rank 3]", "[RANK 3]", Lightning "[rank: 3]",
# a trainer's own "[rank3/8]" (rank of world size) or "[rank3]".
TEXT_RANK = re.compile(r"\[(?:Rank|RANK|rank:) ?(?P<n>-?\d{1,7})\]|\[rank(?P<s>\d{1,7})(?:/\d{1,7})?\]")

_template: list[PrefixFormat] = []
LEADING = {"kubectl", "pdsh"}


def compile_prefix_template(template: str) -> PrefixFormat:
    """A torchrun ``--log-line-prefix-template`` (``${role_name}``, ``${rank}``,
    ``${local_rank}``, ``${hostname}``; ``${role}`` too) as a prefix format."""
    fields = {
        "role_name": r"(?P<role_name>[A-Za-z_][\w-]{0,62}?)",
        "role": r"(?P<role_name>[A-Za-z_][\w-]{0,62}?)",
        "rank": rf"(?P<rank>{_N})",
        "local_rank": rf"(?P<local_rank>{_N})",
        "hostname": r"(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{0,62})",
    }
    out, pos, seen = [], 0, set()
    for m in re.finditer(r"\$\{(\w+)\}", template):
        out.append(re.escape(template[pos : m.start()]))
        name = m.group(1)
        if name not in fields:
            raise ValueError(f"unknown field ${{{name}}} in the prefix template")
        grp = fields[name]
        key = "role" if name in ("role", "role_name") else name
        if key in seen:
            grp = re.sub(r"\(\?P<\w+>", "(?:", grp)
        seen.add(key)
        out.append(grp)
        pos = m.end()
    out.append(re.escape(template[pos:]))
    rx = re.compile("".join(out) + " ?")

    return PrefixFormat("prefix-template", rx, ())


def set_prefix_template(template: str | None) -> None:
    """Install (or, with None, remove) the user's torchrun prefix template for this process."""
    _template.clear()
    _FIRST.clear()
    if template:
        _template.append(compile_prefix_template(template))




def active_formats() -> tuple[PrefixFormat, ...]:
    """The user's prefix template (when set) first, then the built-in registry."""
    return (*_template, *FORMATS)


def first_format() -> re.Pattern | None:
    """One expression whose match at a position names the first active format (in registry
    order) whose own expression matches there: the formats' expressions as alternatives, the
    ``i``-th in a group named ``_i`` (``match.lastgroup``), their own groups unnamed. A line's
    last round of prefixes, where none applies, and a line with no prefix at all are told in
    one match instead of ten, and a round skips the formats before the first that matches
    (together a third of the door's time). None: the formats cannot be joined (a pattern that
    refers to its own groups, or sets flags of its own): each is tried alone."""
    if not _FIRST:
        fmts = active_formats()
        try:
            if any(f.rx.flags != re.UNICODE or _BACKREF.search(f.rx.pattern) for f in fmts):
                raise re.error("not joined")
            _FIRST.append(re.compile("|".join(f"(?P<_{i}>{_UNNAMED.sub('(?:', f.rx.pattern)})"
                                              for i, f in enumerate(fmts))))
        except re.error:
            _FIRST.append(None)
    return _FIRST[0]


_UNNAMED = re.compile(r"(?<!\\)\(\?P<\w+>")  # a named group's opening (not an escaped parenthesis)
_BACKREF = re.compile(r"\\[1-9]|\(\?P=")
_FIRST: list = []
