"""NCCL RAS reports (NCCL >= 2.24): the dead and missing processes and ranks they name.

``ncclras`` (or ``echo verbose status | nc localhost 28028`` on a node of the job) prints a job
summary, a table of communicators and, when something is wrong, ``Errors``/``Warnings``
sections. The forms read here are those of NCCL's ``src/ras/client_support.cc`` and of the
samples in its RAS documentation:

* ``DEAD`` / ``N job process(es) considered dead (unreachable via the RAS network)`` followed by
  ``Process P on node H managing GPU G`` lines;
* ``INCOMPLETE`` / ``Missing communicator data from N job process(es)``, with the same lines
  (processes that did not answer);
* ``#0-0 (hash) INCOMPLETE`` / ``Missing communicator data from N rank(s)`` with
  ``The missing rank: 21`` (2.24) or ``Rank 21 -- GPU 5 managed by process P on node H``;
* ``#0-0 (hash) MISMATCH`` / ``N ranks have launched up to operation X`` (or ``have status S``),
  each group followed by its members when it is an outlier;
* ``TIMEOUT`` / ``Encountered N communication timeouts while gathering communicator data``;
* the monitor mode's ``[time] PEER_DEAD: Process P on node H managing GPU G`` (2.29);
* the JSON form (``-f json``, 2.28.7): ``communicators[].missing_ranks[]``.

The lines may carry a log's prefixes (a launcher that logs the report): patterns search, they
are not anchored at the line start. Pure: text in, facts out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from .text import safe_str

__all__ = ["RasProcess", "RasReport", "parse_ras", "sniff_ras"]

_MAX_TEXT = 16 << 20
_PROCESS = re.compile(r"\bProcess (\d{1,9}) on node (\S{1,255}) managing GPUs? (\S{1,64})")
_RANK_LINE = re.compile(r"\bRank (\d{1,7})(?: has (?:status (\w+)|launched up to operation (\d+)|not launched any "
                        r"operations))? -- (?:GPU (\S{1,64}) managed by process (\d{1,9}) on node (\S{1,255})"
                        r"|\[process information not found\])")
_MISSING_RANKS = re.compile(r"\bThe missing ranks?: (\d{1,7}(?:, ?\d{1,7})*)")
_COMM = re.compile(r"#(\d{1,7})-(\d{1,7}) \(([0-9a-f]{1,16})\) (INCOMPLETE|MISMATCH|ERROR)\b")
_DEAD = re.compile(r"\b(\d{1,7}) job process(?:es)? (?:is |are )?considered dead")
_JOB_MISSING = re.compile(r"\bMissing communicator data from (\d{1,7}) job process")
_GROUP = re.compile(r"\b(\d{1,7}) ranks? ha(?:s|ve) (?:launched up to operation (\d+)|status (\w+)|not launched any "
                    r"operations)")
_TIMEOUTS = re.compile(r"\bEncountered (\d{1,7}) communication timeouts?")
_PEER_DEAD = re.compile(r"\bPEER_DEAD: Process (\d{1,9}) on node (\S{1,255}) managing GPUs? (\S{1,64})")
_SECTION = re.compile(r"^\s*(?:\S+\s+)?(DEAD|INCOMPLETE|TIMEOUT|Errors|Warnings)\s*$")


@dataclass(frozen=True)
class RasProcess:
    pid: int
    node: str
    gpu: str = ""
    rank: int | None = None

    def describe(self) -> str:
        who = f"rank {self.rank}: " if self.rank is not None else ""
        return f"{who}process {self.pid} on node {self.node}" + (f" (GPU {self.gpu})" if self.gpu else "")


@dataclass
class RasReport:
    path: str
    dead: list[RasProcess] = field(default_factory=list)
    unresponsive: list[RasProcess] = field(default_factory=list)  # job-level INCOMPLETE
    missing_ranks: dict[int, RasProcess | None] = field(default_factory=dict)  # per communicator
    outliers: dict[int, str] = field(default_factory=dict)  # rank -> its group ("launched up to operation 6649")
    timeouts: int = 0
    lines: list[tuple[int, str]] = field(default_factory=list)  # (line number, text) of what was read

    @property
    def named_ranks(self) -> list[int]:
        return sorted(self.missing_ranks)

    @property
    def empty(self) -> bool:
        return not (self.dead or self.unresponsive or self.missing_ranks or self.outliers)

    def evidence(self) -> list[str]:
        out = []
        if self.dead:
            out.append("NCCL RAS: dead (unreachable via the RAS network): " + "; ".join(p.describe() for p in self.dead))
        if self.unresponsive:
            out.append("NCCL RAS: no communicator data from " + "; ".join(p.describe() for p in self.unresponsive))
        if self.missing_ranks:
            out.append("NCCL RAS: missing from a communicator: " + "; ".join(
                (p.describe() if p else f"rank {r}") for r, p in sorted(self.missing_ranks.items())))
        if self.outliers:
            groups: dict[str, list[int]] = {}
            for r, g in self.outliers.items():
                groups.setdefault(g, []).append(r)
            out.append("NCCL RAS: outlier ranks: " + "; ".join(f"ranks {sorted(v)} {k}" for k, v in groups.items()))
        if self.timeouts:
            out.append(f"NCCL RAS: {self.timeouts} communication timeouts while gathering data (an unresponsive process)")
        return out


_SNIFF = re.compile(rb"(?m)^Job summary\r?\n=====|^Communicators\.\.\.|RAS Monitor Mode|PEER_DEAD: Process \d"
                    rb"|^\s*#\d{1,7}-\d{1,7} \([0-9a-f]{1,16}\) (?:INCOMPLETE|MISMATCH|ERROR)|job process(?:es)? "
                    rb"(?:is |are )?considered dead")


def sniff_ras(head: bytes) -> bool:
    """Does this text (its first bytes) hold a RAS report, text or JSON?"""
    h = head[:65536]
    if h.lstrip()[:1] == b"{":
        return b'"communicators"' in h and (b'"nccl_version"' in h or b'"missing_ranks"' in h)
    return bool(_SNIFF.search(h))


def _json(report: RasReport, raw) -> None:
    comms = raw.get("communicators") if isinstance(raw, dict) else None
    if not isinstance(comms, list):
        return
    for c in comms[:100_000]:
        if not isinstance(c, dict):
            continue
        for m in (c.get("missing_ranks") or [])[:100_000]:
            if not isinstance(m, dict) or not isinstance(m.get("rank"), int):
                continue
            pid = m.get("pid") if isinstance(m.get("pid"), int) else 0
            proc = RasProcess(pid, safe_str(str(m.get("host", "?"))[:255]), safe_str(str(m.get("cuda_dev", ""))[:64]),
                              m["rank"])
            report.missing_ranks[m["rank"]] = proc
            st = m.get("status") if isinstance(m.get("status"), dict) else {}
            if st.get("considered_dead") is True and proc not in report.dead:
                report.dead.append(proc)


def parse_ras(text: str, path: str = "") -> RasReport:
    """The facts a RAS report (or a log holding one) states."""
    report = RasReport(path)
    text = text[:_MAX_TEXT]
    if text.lstrip().startswith("{"):
        try:
            _json(report, json.loads(text))
            return report
        except (ValueError, RecursionError):
            pass
    section = None  # DEAD | INCOMPLETE | comm-INCOMPLETE | comm-MISMATCH | None
    group = ""
    for no, raw_line in enumerate(text.splitlines(), 1):
        line = safe_str(raw_line[:4096])
        m = _COMM.search(line)
        if m:
            section, group = f"comm-{m.group(4)}", ""
            continue
        m = _SECTION.match(line)
        if m:
            section = m.group(1) if m.group(1) in ("DEAD", "INCOMPLETE") else None
            continue
        m = _PEER_DEAD.search(line)
        if m:
            report.dead.append(RasProcess(int(m.group(1)), m.group(2), m.group(3)))
            report.lines.append((no, line))
            continue
        if _DEAD.search(line) or _JOB_MISSING.search(line):
            report.lines.append((no, line))
            continue
        m = _TIMEOUTS.search(line)
        if m:
            report.timeouts += int(m.group(1))
            continue
        m = _MISSING_RANKS.search(line)
        if m:
            for r in re.split(r", ?", m.group(1)):
                report.missing_ranks.setdefault(int(r), None)
            report.lines.append((no, line))
            continue
        m = _GROUP.search(line)
        if m and section == "comm-MISMATCH":
            group = (f"launched up to operation {m.group(2)}" if m.group(2) else
                     f"status {m.group(3)}" if m.group(3) else "launched no operation")
            continue
        m = _RANK_LINE.search(line)
        if m:
            rank = int(m.group(1))
            proc = RasProcess(int(m.group(5)), m.group(6), m.group(4) or "", rank) if m.group(5) else None
            if section == "comm-INCOMPLETE":
                report.missing_ranks[rank] = proc
                report.lines.append((no, line))
            elif section == "comm-MISMATCH":
                own = (f"launched up to operation {m.group(3)}" if m.group(3) else
                       f"status {m.group(2)}" if m.group(2) else group)
                report.outliers[rank] = own or "an outlier"
            continue
        m = _PROCESS.search(line)
        if m and section in ("DEAD", "INCOMPLETE"):
            p = RasProcess(int(m.group(1)), m.group(2), m.group(3))
            (report.dead if section == "DEAD" else report.unresponsive).append(p)
            report.lines.append((no, line))
    # a process named dead or silent is the rank a communicator misses on the same node and pid
    by_proc = {(p.pid, p.node): p for p in report.missing_ranks.values() if p is not None}
    report.dead = [by_proc.get((p.pid, p.node), p) for p in report.dead]
    report.unresponsive = [by_proc.get((p.pid, p.node), p) for p in report.unresponsive]
    return report
