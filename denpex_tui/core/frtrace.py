"""What the Flight Recorder dumps of a job say together: per process group, where each rank is,
and which rank is the odd one.

For every process group, each rank's entries are lined up by collective sequence id. Then, in
this order (the first that applies is the verdict, the others are kept as evidence):

1. **mismatch** (desync): at the first sequence id the ranks disagree on the op, the sizes or the
   dtypes, the ranks that differ from the majority are named. When a rank's later collectives are
   the majority's shifted by one or two, it skipped (or added) that many: said so.
2. **missing / ahead**: ranks whose last sequence id is behind the others' are missing from the
   collective the others entered (a rank stuck outside any collective: a save, a data loader,
   a dead process); when a few ranks are ahead of the many, they wait in a collective nobody else
   reached.
3. **stuck**: a rank still in ``started`` (NCCL) at a sequence id the others completed.
4. **no dump**: a member rank without a dump while every dumped rank waits at the same place:
   dead, or never dumped.

One dump per rank is used (the one with the newest entry; a later copy after the teardown may
have marked a timed-out entry retired). Pure: dumps in, a report out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace

from .frdump import FRDump, FREntry
from .ranks import rank_ranges

__all__ = ["RankGroup", "Verdict", "FRReport", "analyse", "user_frame"]

_KIND_ORDER = {"mismatch": 0, "missing": 1, "ahead": 2, "stuck": 3, "no-dump": 4}
SIGNATURES = {"mismatch": "torch.fr-collective-mismatch", "missing": "torch.fr-rank-missing",
              "ahead": "torch.fr-rank-missing", "stuck": "torch.fr-rank-stuck", "no-dump": "torch.fr-rank-missing"}
_MAX_SHIFT = 3


@dataclass
class RankGroup:
    """Ranks at the same place: one row of the collective table."""

    ranks: list[int]
    last_seq: int | None
    op: str
    state: str  # completed | started | waiting | retired | no dump
    odd: bool = False
    note: str = ""
    where: str = ""  # the user's frame of the last collective


@dataclass
class Verdict:
    kind: str
    ranks: list[int]
    pg: str
    pg_desc: str
    seq: int | None
    text: str
    evidence: list[str] = field(default_factory=list)
    confidence: str = "medium"
    dump: str | None = None  # a dump that shows it (the odd rank's, else a peer's)
    where: str = ""
    origin: str = "Flight Recorder dumps"  # or "NCCL RAS"
    line: int = 0  # the line of a RAS report that names the rank

    @property
    def signature(self) -> str:
        return "nccl.ras-missing-rank" if self.origin == "NCCL RAS" else SIGNATURES[self.kind]


@dataclass
class FRReport:
    dumps: dict[int, FRDump]
    expected: list[int]
    no_dump: list[int]
    pg: str
    pg_desc: str
    groups: list[RankGroup]
    verdict: Verdict | None
    others: list[Verdict]
    notes: list[str]


def user_frame(e: FREntry | None) -> str:
    """The innermost frame outside torch: where the job called the collective."""
    if e is None:
        return ""
    for name, fname, line in e.frames:
        if "/torch/" not in fname and "\\torch\\" not in fname:
            return f"{name} ({fname.rsplit('/', 1)[-1]}:{line})"
    return ""


def _state(e: FREntry | None) -> str:
    if e is None:
        return "no entry"
    if e.state in ("completed", "started"):
        return e.state
    return "waiting" if e.retired is False else "retired"


def _pick(dumps: list[FRDump], notes: list[str]) -> dict[int, FRDump]:
    by: dict[int, list[FRDump]] = {}
    for d in dumps:
        if d.rank is None:
            notes.append(f"{d.path}: no rank in its file name (torch names dumps <prefix><rank>): not used")
            continue
        by.setdefault(d.rank, []).append(d)
    out = {}
    for r, ds in by.items():
        # the newest entry wins; on a tie, the dump that saw its last collective still in flight
        # (a copy written after the teardown may have retired the timed-out entry), then the later
        ds.sort(key=lambda d: (d.newest, _pending_last(d), len(d.entries), d.mtime or 0.0), reverse=True)
        best = ds[0]
        if len(ds) > 1:
            frames = {e.record_id: e.frames for d in ds[1:] for e in d.entries if e.frames}
            if frames and not any(e.frames for e in best.entries):  # JSON dumps carry no stacks
                best = dc_replace(best, entries=[dc_replace(e, frames=frames.get(e.record_id, ())) for e in best.entries])
            notes.append(f"rank {r}: {len(ds)} dumps; used {best.path} (newest entry, taken while in flight)")
        out[r] = best
    return out


def _pending_last(d: FRDump) -> bool:
    last = max(d.entries, key=lambda e: e.record_id, default=None)
    return last is not None and last.retired is False


def _members(pg: str, desc: str, chosen: dict[int, FRDump], with_entries: set[int]) -> set[int]:
    cfgs = [d.pg_config for d in chosen.values()]
    for c in cfgs:
        if pg in c and c[pg][1]:
            return set(c[pg][1])
    if desc == "default_pg" or pg == "0":
        # gloo (2.13) names the default group "" in pg_config and "0" in its entries
        biggest = max((v[1] for c in cfgs for v in c.values()), key=len, default=())
        if biggest:
            return set(biggest)
    return set(with_entries)


def _fp_shift(a: dict[int, FREntry], b: dict[int, FREntry], s: int, d: int) -> bool:
    """Do a's collectives from ``s`` on equal b's from ``s + d`` on (overlap of at least one)?"""
    n = 0
    i = s
    while i in a and (i + d) in b:
        if a[i].fingerprint != b[i + d].fingerprint:
            return False
        n += 1
        i += 1
    return n >= 1


def _analyse_pg(pg: str, desc: str, seqs: dict[int, dict[int, FREntry]], members: set[int],
                chosen: dict[int, FRDump]) -> list[Verdict]:
    out: list[Verdict] = []
    dumped = sorted(r for r in members if r in chosen)
    have = [r for r in dumped if seqs.get(r)]
    label = f"process group {pg}" + (f" ({desc})" if desc else "")
    if not have:
        return out
    # 1. the first sequence id at which the ranks disagree (only where every buffer reaches)
    floor = max(min(seqs[r]) for r in have)
    all_seqs = sorted({s for r in have for s in seqs[r] if s >= floor})
    for s in all_seqs:
        at = {r: seqs[r][s] for r in have if s in seqs[r]}
        if len(at) < 2:
            continue
        fps = Counter(e.fingerprint for e in at.values())
        if len(fps) < 2:
            continue
        (top, n_top), *rest = fps.most_common()
        tie = rest and rest[0][1] == n_top
        majority = sorted(r for r, e in at.items() if e.fingerprint == top)
        odd = sorted(r for r, e in at.items() if e.fingerprint != top)
        ref = at[majority[0]]
        ev = [f"{label}, seq {s}: ranks {rank_ranges(majority)} ran {ref.describe()}"]
        for fp in [f for f, _ in fps.most_common() if f != top]:
            rs = sorted(r for r, e in at.items() if e.fingerprint == fp)
            ev.append(f"{label}, seq {s}: rank{'s' if len(rs) > 1 else ''} {rank_ranges(rs)} ran "
                      f"{at[rs[0]].describe()}")
        text = (f"rank{'s' if len(odd) > 1 else ''} {rank_ranges(odd)} called {at[odd[0]].describe()} at seq {s} "
                f"where rank{'s' if len(majority) > 1 else ''} {rank_ranges(majority)} called {ref.describe()} "
                f"({label})")
        for r in odd:
            for d in range(1, _MAX_SHIFT + 1):
                if _fp_shift(seqs[r], seqs[majority[0]], s, d):
                    skipped = [seqs[majority[0]][s + i].describe() for i in range(d) if s + i in seqs[majority[0]]]
                    ev.append(f"rank {r}'s collectives from seq {s} on are the others' from seq {s + d} on: it "
                              f"skipped {d} collective{'s' if d > 1 else ''} ({'; '.join(skipped)})")
                    text = f"rank {r} skipped a collective at seq {s} ({skipped[0] if skipped else '?'}): its later " \
                           f"collectives are one behind its peers' ({label})" if d == 1 else text
                    break
                if _fp_shift(seqs[majority[0]], seqs[r], s, d):
                    ev.append(f"rank {r} ran {d} collective{'s' if d > 1 else ''} its peers did not, at seq {s}")
                    break
        conf = "low" if tie else ("high" if len(majority) >= 2 else "medium")
        if tie:
            ev.append("as many ranks on each side: which side is wrong cannot be told from the dumps")
        out.append(Verdict("mismatch", odd, pg, desc, s, text, ev, conf,
                           chosen[odd[0]].path if odd and odd[0] in chosen else None, user_frame(at[odd[0]])))
        break
    # 2. behind or ahead of the others
    last = {r: max(seqs[r]) for r in have}
    top = max(last.values())
    at_top = sorted(r for r in have if last[r] == top)
    behind = sorted(r for r in have if last[r] < top)
    e_top = seqs[at_top[0]][top]
    if behind:
        if len(behind) <= len(at_top):
            ev = [f"{label}: ranks {rank_ranges(at_top)} entered seq {top} ({e_top.describe()}, "
                  f"{_state(e_top)})"]
            for r in behind:
                le = seqs[r][last[r]]
                ev.append(f"rank {r}'s last collective is seq {last[r]} ({le.describe()}, {_state(le)}): it never "
                          f"entered seq {top}")
            text = (f"rank{'s' if len(behind) > 1 else ''} {rank_ranges(behind)} never entered seq {top} "
                    f"({e_top.describe()}) that rank{'s' if len(at_top) > 1 else ''} {rank_ranges(at_top)} entered "
                    f"({label})")
            out.append(Verdict("missing", behind, pg, desc, top, text, ev,
                               "high" if len(at_top) >= 2 * len(behind) else "medium",
                               chosen[behind[0]].path, user_frame(seqs[behind[0]][last[behind[0]]])))
        else:
            text = (f"rank{'s' if len(at_top) > 1 else ''} {rank_ranges(at_top)} entered seq {top} "
                    f"({e_top.describe()}) that no other rank reached ({label})")
            out.append(Verdict("ahead", at_top, pg, desc, top, text,
                               [text, f"ranks {rank_ranges(behind)} stopped before it: look at where they are "
                                      "(their stacks)"], "low", chosen[at_top[0]].path, user_frame(e_top)))
    # 3. still started where the others completed
    if not behind:
        started = sorted(r for r in at_top if seqs[r][top].state == "started")
        done = sorted(r for r in at_top if seqs[r][top].state == "completed")
        if started and done:
            text = (f"rank{'s' if len(started) > 1 else ''} {rank_ranges(started)} still in seq {top} "
                    f"({e_top.describe()}, started) that ranks {rank_ranges(done)} completed ({label})")
            out.append(Verdict("stuck", started, pg, desc, top, text, [text], "medium", chosen[started[0]].path,
                               user_frame(seqs[started[0]][top])))
    # 4. members without a dump
    nodump = sorted(members - set(chosen))
    if nodump:
        text = (f"rank{'s' if len(nodump) > 1 else ''} {rank_ranges(nodump)} left no dump (dead, or never dumped) "
                f"while ranks {rank_ranges(at_top)} reached seq {top} ({e_top.describe()}, {_state(e_top)}) ({label})")
        out.append(Verdict("no-dump", nodump, pg, desc, top, text, [text],
                           "medium" if not behind else "low", None, ""))
    return out


def _groups(pg: str, seqs: dict[int, dict[int, FREntry]], expected: list[int], chosen: dict[int, FRDump],
            verdict: Verdict | None) -> list[RankGroup]:
    rows: dict[tuple, list[int]] = {}
    for r in expected:
        if r not in chosen:
            key = (None, "", "no dump", "")
        elif not seqs.get(r):
            key = (None, "", "no entry", "")
        else:
            s = max(seqs[r])
            e = seqs[r][s]
            key = (s, e.describe(), _state(e), user_frame(e))
        rows.setdefault(key, []).append(r)
    odd = set(verdict.ranks) if verdict else set()
    out = []
    for (s, op, st, where), rs in rows.items():
        g = RankGroup(sorted(rs), s, op, st, odd=bool(odd & set(rs)) or st == "no dump", where=where)
        if verdict and odd & set(rs):
            g.note = {"mismatch": f"differs at seq {verdict.seq}", "missing": f"never entered seq {verdict.seq}",
                      "ahead": f"alone in seq {verdict.seq}", "stuck": f"still started in seq {verdict.seq}",
                      "no-dump": "no dump"}[verdict.kind]
        out.append(g)
    # the odd ranks first, then the many; within each, by place
    out.sort(key=lambda g: (not g.odd, len(g.ranks), g.last_seq if g.last_seq is not None else -1, g.ranks[0]))
    return out


def analyse(dumps: list[FRDump], world: int | None = None) -> FRReport | None:
    """The report for one job's dumps (``world``: the ranks the logs show, so that a rank with
    neither a dump nor a group config is still counted)."""
    notes: list[str] = []
    chosen = _pick(dumps, notes)
    if not chosen:
        return None
    by_pg: dict[str, dict[int, dict[int, FREntry]]] = {}
    descs: dict[str, str] = {}
    for r, d in chosen.items():
        for e in d.entries:
            if e.is_p2p:
                continue
            by_pg.setdefault(e.pg, {}).setdefault(r, {})[e.seq] = e
            descs.setdefault(e.pg, e.pg_desc)
        if d.skipped:
            notes.append(f"rank {r}: {d.skipped} malformed entries in {d.path} skipped")
    verdicts: list[tuple] = []
    members_of: dict[str, set[int]] = {}
    for pg, seqs in by_pg.items():
        m = _members(pg, descs.get(pg, ""), chosen, set(seqs))
        if world and (descs.get(pg) == "default_pg" or pg == "0"):
            m |= set(range(world))
        members_of[pg] = m
        for v in _analyse_pg(pg, descs.get(pg, ""), seqs, m, chosen):
            verdicts.append((_KIND_ORDER[v.kind], -len(m), v))
    verdicts.sort(key=lambda x: (x[0], x[1]))
    vs = [v for *_, v in verdicts]
    main_pg = vs[0].pg if vs else max(by_pg, key=lambda p: (len(members_of[p]), descs.get(p) == "default_pg"),
                                      default="")
    expected = sorted(members_of.get(main_pg, set(chosen)) | set(chosen))
    if world:
        expected = sorted(set(expected) | set(range(world)))
    groups = _groups(main_pg, by_pg.get(main_pg, {}), expected, chosen, vs[0] if vs else None)
    return FRReport(chosen, expected, sorted(set(expected) - set(chosen)), main_pg, descs.get(main_pg, ""),
                    groups, vs[0] if vs else None, vs[1:], notes)


def report_json(rep: FRReport) -> dict:
    """The collective table and verdict as plain data (``scan --json``'s ``collectives``)."""
    def vj(v: Verdict) -> dict:
        return {"kind": v.kind, "signature": v.signature, "ranks": v.ranks, "pg": v.pg, "pg_desc": v.pg_desc,
                "seq": v.seq, "text": v.text, "evidence": list(v.evidence), "confidence": v.confidence,
                "dump": v.dump, "where": v.where}

    return {
        "pg": rep.pg, "pg_desc": rep.pg_desc, "expected_ranks": rep.expected, "no_dump": rep.no_dump,
        "dumps": [{"rank": r, "path": d.path, "format": d.fmt, "version": d.version, "entries": len(d.entries)}
                  for r, d in sorted(rep.dumps.items())],
        "groups": [{"ranks": g.ranks, "last_seq": g.last_seq, "op": g.op, "state": g.state, "odd": g.odd,
                    "note": g.note, "where": g.where} for g in rep.groups],
        "verdict": vj(rep.verdict) if rep.verdict else None,
        "others": [vj(v) for v in rep.others],
        "notes": list(rep.notes),
    }


def collective_rows(table: dict, max_rows: int = 12) -> list[tuple[bool, str]]:
    """The collective table (``report_json``) as text rows, the odd ranks first: ``(odd, text)``;
    what ``scan`` prints and ``watch`` shows."""
    out = []
    groups = table.get("groups", [])
    for g in groups[:max_rows]:
        n = len(g["ranks"])
        who = f"{'rank' if n == 1 else f'{n:,} ranks'} {rank_ranges(g['ranks'])}"
        seq = f"seq {g['last_seq']}" if g["last_seq"] is not None else "-"
        text = f"{'!' if g['odd'] else ' '} {who:<20} {seq:<9} {g['state']:<9} {g['op'] or ''}"
        if g.get("where"):
            text += f"  at {g['where']}"
        if g.get("note"):
            text += f"  <- {g['note']}"
        out.append((bool(g["odd"]), text))
    if len(groups) > max_rows:
        out.append((False, f"  ... {len(groups) - max_rows} more rows"))
    return out
