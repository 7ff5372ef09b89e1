"""Every fact about one log line, computed in one place: :func:`parse_line` -> :class:`ParsedLine`.

A line is peeled, front to back, by a registry of *prefix formats* (:data:`FORMATS`): each is
one small entry with its regular expression, what it tells (rank, local rank, node, device,
pid, time, level) and real example lines that run as tests. Launchers stack prefixes
(``c000001: [default3]:[rank3]: ...``, ``  0: [rank0]: ...``), so the registry is tried again
after each match until none applies. Inside the text, ``[Rank N]`` (DeepSpeed, c10d),
``[RANK N]`` and ``[rank: N]`` (Lightning) name a global rank too.

Every consumer — the pipeline, the live engine and its stall detector, first-warning search,
the view, path extraction — reads ranks and times from here and nothing else. Local ranks
become global ones in one place too: :meth:`denpex_tui.core.job.JobState.resolve`.

A number is a rank, pid or device only when it is in a sane range (at most 7 digits): a
``[rank<4301 digits>]:`` line is text, never an overflow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable

__all__ = [
    "ParsedLine",
    "PrefixFormat",
    "FORMATS",
    "parse_line",
    "parse_prefix",
    "parse_time",
    "parse_level",
    "strip_prefixes",
    "compile_prefix_template",
    "set_prefix_template",
    "stream_labels",
    "label_kind",
    "text_ranks",
]

_MAX_PREFIX_ROUNDS = 6
_N = r"\d{1,7}"  # a rank, pid, task or device: at most 7 digits


@dataclass(slots=True)
class ParsedLine:
    """One line as Denpex understands it. ``text`` is the line with every prefix removed."""

    text: str
    host: str | None = None  # node name a prefix gives (pdsh, NCCL, kubectl pod)
    task: int | None = None  # srun --label task id
    local_rank: int | None = None  # torchrun [defaultN]
    rank: int | None = None  # global rank, when the line itself says so
    role_name: str | None = None
    device: int | None = None  # NCCL [dev]
    pid: int | None = None  # NCCL host:pid:tid, glog pid
    time: datetime | None = None
    time_text: str | None = None
    precision: float | None = None  # seconds the written time can be off by
    level: str | None = None
    formats: tuple[str, ...] = ()

    @property
    def node(self) -> str | None:
        return self.host

    def stream_key(self) -> tuple | None:
        """Which stream of a shared file (a console) the line belongs to."""
        if self.local_rank is not None:
            return ("l", self.local_rank)
        if self.task is not None:
            return ("t", self.task)
        if self.rank is not None and ("mpirun" in self.formats or "torch-rank" in self.formats):
            return ("g", self.rank)
        if self.host is not None:
            return ("h", self.host)
        return None


@dataclass(frozen=True)
class PrefixFormat:
    """One launcher/log prefix: ``rx`` is matched at the current position and its named groups
    (``host``, ``pid``, ``task``, ``rank``, ``local_rank``, ``device``, ``role_name``, ``lvl``,
    ``ts``) are what it tells; ``strip`` says whether the matched text is removed."""

    name: str
    rx: re.Pattern[str]
    examples: tuple[str, ...]
    guard: Callable[[ParsedLine, re.Match[str]], bool] | None = None  # False: not this format after all
    strip: bool = True
    once: bool = True  # may match only once per line
    first_only: bool = False  # only at the very start of the line


def _int(s: str | None) -> int | None:
    if s is None or len(s) > 7:
        return None
    return int(s)


_NUMERIC_GROUPS = ("pid", "task", "rank", "local_rank", "device")
_TEXT_GROUPS = ("host", "role_name")
_GLOG_LEVEL = {"D": "debug", "I": "info", "W": "warning", "E": "error", "F": "critical"}


def apply_groups(p: ParsedLine, m: re.Match[str]) -> bool:
    """Copy a format's named groups into the line: numbers only in range, ``lvl`` as a glog
    level letter, ``ts`` as the format's own timestamp."""
    d = m.groupdict()
    for k in _NUMERIC_GROUPS:
        if d.get(k) is not None:
            setattr(p, k, _int(d[k]))
    for k in _TEXT_GROUPS:
        if d.get(k) is not None:
            setattr(p, k, d[k])
    if d.get("lvl"):
        p.level = _GLOG_LEVEL[d["lvl"]]
    if d.get("ts"):
        t, txt = parse_time(d["ts"])
        if t is not None:
            p.time, p.time_text, p.precision = t, txt, _precision(txt)
    return True


def _not_a_word(p: ParsedLine, m: re.Match[str]) -> bool:
    return not _NOT_HOST.fullmatch(m.group("host"))


def _not_rank(p: ParsedLine, m: re.Match[str]) -> bool:
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
# and a logging format's own tag, "[rank3]" or with the world size "[rank3/4]" (a DeepSpeed
# launcher's console has no prefix: a trainer's format is the only thing naming the rank).
_TEXT_RANK = re.compile(r"\[(?:Rank|RANK|rank:?) ?(?P<n>-?\d{1,7})(?:/\d{1,7})?\]")

_template: list[PrefixFormat] = []
_LEADING = {"kubectl", "pdsh"}


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
    if template:
        _template.append(compile_prefix_template(template))


def parse_line(line: str, year_hint: int | None = None) -> ParsedLine:
    """Everything Denpex reads from one line (already safe text)."""
    p = ParsedLine(text=line)
    s = line
    used: list[str] = []
    fmts = (*_template, *FORMATS)
    for rnd in range(_MAX_PREFIX_ROUNDS):
        hit = False
        for f in fmts:
            if (f.once and f.name in used) or (f.first_only and rnd > 0):
                continue
            if f.name in ("pdsh", "srun-label") and not _LEADING.issuperset(used):
                continue  # host and task labels lead the line (after a pod prefix at most)
            m = f.rx.match(s)
            if m is None or (f.guard is not None and not f.guard(p, m)):
                continue
            apply_groups(p, m)
            used.append(f.name)
            if f.strip:
                s = s[m.end() :]
                hit = True
            break
        if not hit:
            break
    if p.rank is None:
        m = _TEXT_RANK.search(s, 0, 200)
        if m:
            p.rank = _int(m.group("n").lstrip("-")) if not m.group("n").startswith("-") else None
            # DeepSpeed's/c10d's '[Rank N]' (log_dist: rank 0 speaking for all), or a trainer's own tag
            used.append("rank-tag" if m.group(0).startswith("[rank") and not m.group(0).startswith("[rank:")
                        else "ds-rank")
    p.text = s
    p.formats = tuple(used)
    if p.time is None:
        t, txt = parse_time(s, year_hint)
        if t is not None:
            p.time, p.time_text, p.precision = t, txt, _precision(txt)
    if p.level is None:
        p.level = parse_level(s)
    return p


# The same launcher labels, found in C over a whole chunk of bytes (the live engine's silence
# detector and the last-line scan need which streams spoke, not every line parsed).
_LABELS = re.compile(rb"(?m)^(?:\[pod/[^\]\s]{1,300}\] )?(?:[A-Za-z][\w.-]{0,62}: )?"
                     rb"(\[[A-Za-z_-]{0,63}\d{1,7}\]:|\[\d{1,7},\d{1,7}\]<std|\[\d{1,7}\]<std| {0,6}\d{1,7}: )")
_LABEL_NUM = re.compile(rb"\d{1,7}(?=\]:|\]<|: )")


def stream_labels(data: bytes) -> dict[bytes, int]:
    """Launcher labels at line starts in ``data`` -> the number they carry. ``[defaultN]:``
    gives a local rank, ``[rankN]:`` and mpirun's ``[j,N]<stderr>:`` a global one, srun's
    ``  N: `` a task id; the label itself says which (see :func:`label_kind`)."""
    out: dict[bytes, int] = {}
    for lab in set(_LABELS.findall(data)):
        m = _LABEL_NUM.search(lab)
        if m:
            out[lab] = int(m.group(0))
    return out


_TEXT_RANK_B = re.compile(rb"\[(?:Rank|RANK|rank:?) ?(\d{1,7})(?:/\d{1,7})?\]")


def text_ranks(data: bytes, start: int = 0) -> set[int]:
    """The ranks named by in-text tags (``[Rank 3]``, ``[rank3/4]``) in ``data[start:]``, found
    in C: a console without prefixes has one stream per rank its lines name."""
    return {int(n) for n in set(_TEXT_RANK_B.findall(data, start))}


def label_kind(label: bytes) -> str:
    """'local' ([defaultN]:), 'rank' ([rankN]:, mpirun), or 'task' (srun)."""
    if label.startswith(b"[rank"):
        return "rank"
    if label.endswith(b"<std"):
        return "rank"
    if label.startswith(b"["):
        return "local"
    return "task"


def parse_prefix(line: str) -> ParsedLine:
    """The line's prefixes (compatibility name of :func:`parse_line`)."""
    return parse_line(line)


def strip_prefixes(line: str) -> str:
    return parse_line(line).text


# --- timestamps -------------------------------------------------------------------------

_TS_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Python logging / DeepSpeed / Megatron: 2026-11-29 17:40:16,343  [2026-11-29 17:51:02,788]
    (re.compile(r"\[?(?P<d>\d{4}-\d\d-\d\d)[ T_](?P<t>\d\d:\d\d:\d\d)(?:[.,](?P<f>\d{1,9}))?(?P<tz>Z|[+-]\d\d:?\d\d)?"), "iso"),
    # glog / c10: E1129 17:40:18.662000 or [E1218 20:27:21.426415540
    (re.compile(r"\[?(?P<lvl>[DIWEF])(?P<mo>\d\d)(?P<dd>\d\d) (?P<t>\d\d:\d\d:\d\d)(?:\.(?P<f>\d{1,9}))?\b"), "glog"),
    # accelerate: 01/02/2024 00:20:14
    (re.compile(r"(?P<mo>\d\d)/(?P<dd>\d\d)/(?P<y>\d{4}) (?P<t>\d\d:\d\d:\d\d)"), "mdy"),
]


def _frac(f: str | None) -> int:
    if not f:
        return 0
    return int((f + "000000")[:6])


def _precision(written: str | None) -> float | None:
    if not written:
        return None
    m = re.search(r"\d\d:\d\d:\d\d(?:[.,](\d+))?", written)
    if not m:
        return None
    return 10.0 ** -len(m.group(1)) if m.group(1) else 1.0


def parse_time(text: str, year_hint: int | None = None, search_limit: int = 120) -> tuple[datetime | None, str | None]:
    """Find the line's own timestamp near its start.

    Returns ``(datetime, written)``: the datetime (aware when the log gives an offset, naive
    otherwise) and the text as written. glog lines carry no year: ``year_hint`` (from the
    file's neighbours or mtime) supplies it.
    """
    head = text[:search_limit]
    for rx, kind in _TS_PATTERNS:
        m = rx.search(head)
        if not m:
            continue
        try:
            hh, mm, ss = (int(x) for x in m.group("t").split(":"))
            if kind == "iso":
                y, mo, dd = (int(x) for x in m.group("d").split("-"))
                dt = datetime(y, mo, dd, hh, mm, ss, _frac(m.group("f")))
                tz = m.group("tz")
                if tz:
                    if tz == "Z":
                        dt = dt.replace(tzinfo=timezone.utc)
                    else:
                        sign = 1 if tz[0] == "+" else -1
                        tzd = tz[1:].replace(":", "")
                        dt = dt.replace(tzinfo=timezone(sign * timedelta(hours=int(tzd[:2]), minutes=int(tzd[2:]))))
            elif kind == "glog":
                if m.start() > 24:
                    continue
                year = year_hint or datetime.now().year
                dt = datetime(year, int(m.group("mo")), int(m.group("dd")), hh, mm, ss, _frac(m.group("f")))
            else:
                dt = datetime(int(m.group("y")), int(m.group("mo")), int(m.group("dd")), hh, mm, ss)
        except (ValueError, OverflowError):
            continue
        return dt, m.group(0).lstrip("[")
    return None, None


_LEVEL_WORD = re.compile(r"\b(CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG)\b")
_GLOG_LEVEL_RX = re.compile(r"\[?([DIWEF])\d{4} \d\d:\d\d:\d\d")
_WORD_MAP = {
    "CRITICAL": "critical",
    "FATAL": "critical",
    "ERROR": "error",
    "WARNING": "warning",
    "WARN": "warning",
    "INFO": "info",
    "DEBUG": "debug",
}


def parse_level(text: str) -> str | None:
    m = _GLOG_LEVEL_RX.match(text)
    if m:
        return _GLOG_LEVEL[m.group(1)]
    m = _LEVEL_WORD.search(text, 0, 100)
    if m:
        return _WORD_MAP[m.group(1)]
    return None
