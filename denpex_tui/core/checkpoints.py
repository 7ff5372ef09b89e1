"""``denpex checkpoints DIR``: which checkpoint tags are complete, and which one to resume from.

Layouts (each from the framework's own save code):

* DeepSpeed ``<dir>/global_stepN/`` with ``mp_rank_MM_model_states.pt``,
  ``[bf16_]zero_pp_rank_D_mp_rank_MM_optim_states.pt`` (ZeRO-3 also a per-rank
  ``zero_pp_rank_D_mp_rank_MM_model_states.pt``), ``offloaded_tensors/rankNN/`` with NVMe
  optimizer offload; ``<dir>/latest`` holds the tag and is written by rank 0 only after the
  save (engine.py ``save_checkpoint``): the commit marker.
* HF Trainer ``<dir>/checkpoint-N/``: the model (``model.safetensors``, shards with their
  ``-of-`` count, or ``pytorch_model.bin``), ``optimizer.pt``, ``scheduler.pt``,
  ``rng_state_R.pth`` per process, and ``trainer_state.json`` written last (the marker).
  ``resume_from_checkpoint=True`` takes the highest N whatever its state.
* Megatron-LM ``<dir>/iter_NNNNNNN/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt`` (+
  ``distrib_optim.pt``), or a torch_dist folder; ``latest_checkpointed_iteration.txt`` is the
  tracker (the marker).
* torch.distributed.checkpoint: ``__R_S.distcp`` per rank and ``.metadata``, renamed from
  ``.metadata.tmp`` at the end of ``finish()`` (the marker).
* Lightning ``*.ckpt`` files (one torch zip), or ``*.ckpt`` folders written by its DeepSpeed
  strategy (``save_checkpoint(path, tag="checkpoint")``: a DeepSpeed layout inside).

The set of ranks a tag must have is what the folder's tags show together (a rank seen in any
tag is expected in every tag). Read-only: shards are never loaded; only their headers are read
(a zip's central directory, a safetensors header) and small text markers.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from .shards import TEMP as _TEMP, across_tags as _across_tags, check_files as _check_files
from .shards import NotRegular, file_problem as _file_problem, open_regular, peer_sizes as _peer_sizes
from .untrusted import load_json, read_capped
from .text import safe_str

__all__ = ["CheckpointTag", "CheckpointReport", "inspect_checkpoints", "CheckpointError"]

SCHEMA = 1

# Rank, shard and step numbers come from file names: untrusted. A number past these is no
# number of a real job (a name like zero_pp_rank_99999999999_... would make a list of 10^11).
MAX_RANK = 100_000
MAX_SHARDS = 100_000
MAX_LISTED = 50  # missing/problems shown per tag; the rest are counted

_DS_TAG = re.compile(r"^global_step(\d+)$")
_HF_TAG = re.compile(r"^checkpoint-(\d+)$")
_MEG_TAG = re.compile(r"^iter_(\d{7,})$")
_STEP = re.compile(r"(?:step[=_-]?|global_step|checkpoint-|iter_)(\d+)")
_DS_OPTIM = re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")
_DS_Z3MODEL = re.compile(r"^zero_pp_rank_(\d+)_mp_rank_(\d+)_model_states\.pt$")
_DS_MODEL = re.compile(r"^mp_rank_(\d+)_model_states\.pt$")
_DCP = re.compile(r"^__(\d+)_(\d+)\.distcp$")
_HF_RNG = re.compile(r"^rng_state_(\d+)\.pth$")
_HF_SHARD = re.compile(r"^(model|pytorch_model)-(\d+)-of-(\d+)\.(safetensors|bin)$")
_MEG_RANK = re.compile(r"^mp_rank_\d{2}(?:_\d{3}){0,2}$")


class CheckpointError(ValueError):
    pass


@dataclass
class CheckpointTag:
    tag: str
    path: str
    kind: str
    step: int | None
    missing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    files: dict[str, int] = field(default_factory=dict)  # relative path -> bytes

    @property
    def complete(self) -> bool:
        return not self.missing and not self.problems

    def to_json(self) -> dict:
        return {"tag": safe_str(self.tag), "path": safe_str(self.path), "complete": self.complete,
                "missing": [safe_str(m) for m in self.missing], "problems": [safe_str(p) for p in self.problems]}


@dataclass
class CheckpointReport:
    root: str
    kind: str | None
    tags: list[CheckpointTag]
    pointer: str | None = None  # what `latest` / the tracker names
    pointer_file: str | None = None
    resume_from: str | None = None
    warnings: list[str] = field(default_factory=list)  # said loudly

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "checkpoints": [t.to_json() for t in self.tags],
                "resume_from": safe_str(self.resume_from) if self.resume_from is not None else None}


# -- layouts ------------------------------------------------------------------------------


def _read_pointer(path: str) -> str | None:
    try:
        with open_regular(path) as fh:
            s = fh.read(4096).decode("utf-8", "replace").strip()
        return s or None
    except OSError:  # NotRegular too: a FIFO named latest is no commit marker
        return None


def _n(s: str, limit: int = MAX_RANK) -> int | None:
    """A number from a file name, or None when it is absurd (past ``limit``, or a 5 000-digit
    string that int() refuses)."""
    if len(s) > 12:
        return None
    v = int(s)
    return v if v <= limit else None


def _absurd(t: "CheckpointTag", names, *rxs) -> set[str]:
    """Names of ``t`` matching ``rxs`` whose numbers are absurd: each is a problem of the tag and
    is left out of the expected set."""
    bad = set()
    for n in names:
        for rx in rxs:
            m = rx.match(n)
            if m and any(_n(g) is None for g in m.groups() if g and g.isdigit()):
                bad.add(n)
                t.problems.append(f"{n}: a rank number over {MAX_RANK:,} in its name: not a shard of a real job")
    return bad


def _ds_expect(tags: list[CheckpointTag]) -> None:
    optim, z3model, model, offload = set(), set(), set(), set()
    seen = {}
    for t in tags:
        names = set(os.listdir(t.path))
        names -= _absurd(t, names, _DS_OPTIM, _DS_Z3MODEL, _DS_MODEL)
        seen[t.path] = names
        for n in names:
            if m := _DS_OPTIM.match(n):
                optim.add((n.startswith("bf16_"), int(m.group(1)), int(m.group(2))))
            elif m := _DS_Z3MODEL.match(n):
                z3model.add((int(m.group(1)), int(m.group(2))))
            elif m := _DS_MODEL.match(n):
                model.add(int(m.group(1)))
        if "offloaded_tensors" in names:
            offload.update(os.listdir(os.path.join(t.path, "offloaded_tensors")))
    dps = sorted({d for _, d, _ in optim} | {d for d, _ in z3model})
    mps = sorted({m for *_, m in optim} | {m for _, m in z3model} | model)
    bf16 = any(b for b, *_ in optim)
    if dps:
        dps = list(range(max(dps) + 1))  # dp ranks are 0..N-1: a gap is a missing rank too
    for t in tags:
        names = seen[t.path]
        need = [f"mp_rank_{m:02d}_model_states.pt" for m in sorted(model)]
        if optim:
            pre = "bf16_" if bf16 else ""
            need += [f"{pre}zero_pp_rank_{d}_mp_rank_{m:02d}_optim_states.pt" for m in mps for d in dps]
        if z3model:
            need += [f"zero_pp_rank_{d}_mp_rank_{m:02d}_model_states.pt" for m in mps for d in dps]
        t.missing += [n for n in need if n not in names]
        if offload:  # engine.py: offloaded_tensors/rank{dp:02d}/, the optimizer swap folder minus gradients
            want = offload | {f"rank{d:02d}" for d in dps}
            base = os.path.join(t.path, "offloaded_tensors")
            have = set(os.listdir(base)) if "offloaded_tensors" in names else set()
            t.missing += [f"offloaded_tensors/{r}/" for r in sorted(want - have)]
            per = {r: set(_listdir(os.path.join(base, r))) for r in sorted(have & want)}
            every = set().union(*per.values()) if per else set()
            for r, fs in per.items():
                t.missing += [f"offloaded_tensors/{r}/{f}" for f in sorted(every - fs)]
            for f in sorted(every):
                _peer_sizes(t, {f"offloaded {f}": [f"offloaded_tensors/{r}/{f}" for r in per if f in per[r]]})
        if not need:
            t.problems.append("no DeepSpeed model or optimizer state file")
        _peer_sizes(t, {"ZeRO optimizer shards": [n for n in names if _DS_OPTIM.match(n)],
                        "ZeRO-3 model shards": [n for n in names if _DS_Z3MODEL.match(n)]})


def _hf_expect(tags: list[CheckpointTag]) -> None:
    rngs: set[int] = set()
    optim = sched = False
    for t in tags:
        names = set(os.listdir(t.path)) - _absurd(t, set(os.listdir(t.path)), _HF_RNG)
        rngs |= {int(m.group(1)) for n in names if (m := _HF_RNG.match(n))}
        optim |= "optimizer.pt" in names
        sched |= "scheduler.pt" in names
    for t in tags:
        names = set(os.listdir(t.path))
        shards = [m for n in names if (m := _HF_SHARD.match(n))]
        if shards:
            for stem, total_s, ext in {(m.group(1), m.group(3), m.group(4)) for m in shards}:
                total = _n(total_s, MAX_SHARDS)
                if total is None:
                    t.problems.append(f"{stem}-*-of-{total_s[:20]}{'…' if len(total_s) > 20 else ''}.{ext}: "
                                      f"a shard count over {MAX_SHARDS:,}: damaged name")
                    continue
                t.missing += [f"{stem}-{i:05d}-of-{total:05d}.{ext}" for i in range(1, total + 1)
                              if f"{stem}-{i:05d}-of-{total:05d}.{ext}" not in names]
        elif not names & {"model.safetensors", "pytorch_model.bin", "adapter_model.safetensors",
                          "adapter_model.bin"} and not any(_DS_TAG.match(n) for n in names):
            t.missing.append("model.safetensors (or pytorch_model.bin)")
        if optim and "optimizer.pt" not in names and not any(_DS_TAG.match(n) for n in names):
            t.missing.append("optimizer.pt")
        if sched and "scheduler.pt" not in names:
            t.missing.append("scheduler.pt")
        t.missing += [f"rng_state_{r}.pth" for r in sorted(rngs) if f"rng_state_{r}.pth" not in names]
        if "trainer_state.json" not in names:
            t.missing.append("trainer_state.json (written last: the save did not finish)")
        else:
            try:
                with open_regular(os.path.join(t.path, "trainer_state.json")) as fh:
                    doc = load_json(read_capped(fh, 16 << 20, "trainer_state.json"), "trainer_state.json")
                gs = doc.get("global_step") if isinstance(doc, dict) else None
                if not isinstance(doc, dict) or (gs is not None and (isinstance(gs, bool) or not isinstance(gs, int))):
                    t.problems.append("trainer_state.json: not a trainer state (damaged)")
                elif t.step is not None and gs is not None and gs != t.step:
                    t.problems.append(f"trainer_state.json says global_step {gs}, the folder says {t.step}")
            except NotRegular:
                t.problems.append("trainer_state.json: not a regular file (a FIFO, device or socket)")
            except (OSError, ValueError):
                t.problems.append("trainer_state.json: not valid JSON (or too big or too deep to read)")
        _peer_sizes(t, {"per-process RNG states": [n for n in names if _HF_RNG.match(n)]})


def _meg_expect(tags: list[CheckpointTag]) -> None:
    ranks: set[str] = set()
    distopt = False
    for t in tags:
        for n in os.listdir(t.path):
            if _MEG_RANK.match(n) and os.path.isdir(os.path.join(t.path, n)):
                ranks.add(n)
                distopt |= os.path.exists(os.path.join(t.path, n, "distrib_optim.pt"))
    for t in tags:
        names = set(os.listdir(t.path))
        if ".metadata" in names or any(_DCP.match(n) for n in names):
            continue  # torch_dist format: checked as a DCP folder
        for r in sorted(ranks):
            for f in ("model_optim_rng.pt",) + (("distrib_optim.pt",) if distopt else ()):
                if f"{r}/{f}" not in t.files:
                    t.missing.append(f"{r}/{f}")
        _peer_sizes(t, {"model shards": [f"{r}/model_optim_rng.pt" for r in ranks],
                        "optimizer shards": [f"{r}/distrib_optim.pt" for r in ranks] if distopt else []})


def _dcp_expect(tags: list[CheckpointTag]) -> None:
    ranks: set[int] = set()
    for t in tags:
        bad = _absurd(t, set(t.files), _DCP)
        ranks |= {int(m.group(1)) for n in t.files if n not in bad and (m := _DCP.match(n))}
    for t in tags:
        names = {n for n in t.files if not (_DCP.match(n) and any(_n(g) is None for g in _DCP.match(n).groups()))}
        if ".metadata" not in names and not any(n.endswith(".metadata") and "/" not in n for n in names):
            t.missing.append(".metadata (written last: the save did not finish)")
        have = {int(m.group(1)) for n in names if (m := _DCP.match(n))}
        t.missing += [f"__{r}_*.distcp (rank {r})" for r in sorted(ranks - have)]
        _peer_sizes(t, {"per-rank .distcp shards": [n for n in names if _DCP.match(n)]})


def _step(name: str) -> int | None:
    m = _STEP.search(name)
    return _n(m.group(1), 10**12) if m else None


def _classify(root: str, names: list[str]) -> tuple[str | None, list[str]]:
    def isdir(n):
        return os.path.isdir(os.path.join(root, n))

    for kind, rx in (("deepspeed", _DS_TAG), ("hf-trainer", _HF_TAG), ("megatron", _MEG_TAG)):
        hits = [n for n in names if rx.match(n) and isdir(n)]
        if hits:
            return kind, hits
    ds = [n for n in names if isdir(n) and not n.endswith(".ckpt") and any(
        _DS_MODEL.match(x) or _DS_OPTIM.match(x) or _DS_Z3MODEL.match(x) for x in _listdir(os.path.join(root, n)))]
    if ds:  # a DeepSpeed save with a custom tag (Lightning's "checkpoint")
        return "deepspeed", ds
    ck = [n for n in names if n.endswith(".ckpt")]
    if ck:
        return "lightning", ck
    dcp = [n for n in names if isdir(n) and any(x == ".metadata" or _DCP.match(x) or x == ".metadata.tmp"
                                                 for x in _listdir(os.path.join(root, n)))]
    if dcp:
        return "torch-dcp", dcp
    return None, []


def _listdir(p: str) -> list[str]:
    try:
        return sorted(os.listdir(p))
    except OSError:
        return []


def _lightning(root: str, names: list[str], rep: CheckpointReport) -> list[CheckpointTag]:
    tags, inner = [], []
    for n in names:
        p = os.path.join(root, n)
        t = CheckpointTag(n, p, "lightning", _step(n))
        tags.append(t)
        if os.path.islink(p) and not os.path.exists(p):
            t.problems.append(f"symlink to {os.readlink(p)}, which does not exist")
        elif os.path.isdir(p):  # its DeepSpeed strategy: a DeepSpeed layout inside
            sub = _listdir(p)
            k, hits = _classify(p, sub)
            ptr = _read_pointer(os.path.join(p, "latest")) if "latest" in sub else None
            if k != "deepspeed":
                t.problems.append("a .ckpt folder without a DeepSpeed layout inside")
            if ptr is None:
                t.missing.append("latest (DeepSpeed's commit marker inside the .ckpt folder)")
            elif ptr not in hits:
                t.problems.append(f"latest names {ptr!r}, which is not in the folder")
            inner += [(t, CheckpointTag(h, os.path.join(p, h), "deepspeed", None)) for h in hits]
        else:
            try:
                size = os.stat(p).st_size
            except OSError:
                size = 0
            t.files = {n: size}
            q = _file_problem(p, size)
            if q:
                t.problems.append(q)
    for _, x in inner:
        _check_files(x)
    _ds_expect([x for _, x in inner])  # ranks expected from all the .ckpt folders together
    for t, x in inner:
        t.files.update({f"{x.tag}/{k}": v for k, v in x.files.items()})
        t.missing += [f"{x.tag}/{m}" for m in x.missing]
        t.problems += [f"{x.tag}/{q}" for q in x.problems]
    return tags


def inspect_checkpoints(root: str) -> CheckpointReport:
    """Every tag under ``root`` with what is missing or wrong, and the tag to resume from."""
    if not os.path.isdir(root):
        raise CheckpointError(f"{root}: not a directory")
    return _inspect(root, as_tag=True)


def _inspect(root: str, as_tag: bool) -> CheckpointReport:
    names = _listdir(root)
    kind, tag_names = _classify(root, names)
    if kind is None and as_tag:  # DIR may be one tag itself
        parent = os.path.dirname(os.path.abspath(root))
        k2, hits = _classify(parent, [os.path.basename(os.path.abspath(root))])
        if k2:  # then the whole parent: its other tags say which ranks a tag must have
            root, names = parent, _listdir(parent)
            kind, tag_names = _classify(root, names)
    rep = CheckpointReport(root=root, kind=kind, tags=[])
    if kind is None:
        return rep
    if kind == "lightning":
        rep.tags = _lightning(root, tag_names, rep)
    else:
        rep.tags = [CheckpointTag(n, os.path.join(root, n), kind, _step(n)) for n in tag_names]
        for t in rep.tags:
            _check_files(t)
        {"deepspeed": _ds_expect, "hf-trainer": _hf_expect, "megatron": _meg_expect,
         "torch-dcp": _dcp_expect}[kind](rep.tags)
        if kind == "megatron":
            _dcp_expect([t for t in rep.tags if any(_DCP.match(f) for f in t.files)])
        _across_tags(rep.tags)
    for n in names:  # a staging folder next to the tags (HF's tmp-checkpoint-N, ...)
        if _TEMP.search(n) and os.path.isdir(os.path.join(root, n)):
            t = CheckpointTag(n, os.path.join(root, n), kind, _step(n))
            t.problems.append("staging folder left by an interrupted save")
            rep.tags.append(t)
    rep.tags.sort(key=lambda t: (t.step if t.step is not None else -1, t.tag))
    _resume(rep, names)
    for t in rep.tags:  # a hostile folder never makes an unbounded report
        for attr in ("missing", "problems"):
            items = getattr(t, attr)
            if len(items) > MAX_LISTED:
                setattr(t, attr, items[:MAX_LISTED] + [f"... and {len(items) - MAX_LISTED:,} more"])
    return rep


def _resume(rep: CheckpointReport, names: list[str]) -> None:
    pfile = {"deepspeed": "latest", "megatron": "latest_checkpointed_iteration.txt"}.get(rep.kind or "")
    by_tag = {t.tag: t for t in rep.tags}
    target = None
    if pfile and pfile in names and not os.path.isfile(os.path.join(rep.root, pfile)):
        rep.warnings.append(f"{pfile} is not a regular file (a FIFO, device or socket): not read, so no save "
                            "of this folder is known to have committed")
    elif pfile and pfile in names:
        rep.pointer_file = pfile
        rep.pointer = _read_pointer(os.path.join(rep.root, pfile))
        if rep.kind == "megatron" and rep.pointer is not None:  # ASCII digits only: '²'.isdigit() is True
            rep.pointer = "release" if rep.pointer == "release" else (
                f"iter_{int(rep.pointer):07d}" if re.fullmatch(r"[0-9]{1,12}", rep.pointer) else rep.pointer)
        target = by_tag.get(rep.pointer or "")
        if target is None:
            rep.warnings.append(f"{pfile} names {rep.pointer!r}, which is not a tag in this folder")
        else:
            for t in rep.tags:  # saved after the last commit: never committed
                if t.step is not None and target.step is not None and t.step > target.step:
                    t.problems.append(f"newer than {pfile} ({target.tag}): the save never committed")
    elif pfile:
        rep.warnings.append(f"no {pfile} file: no save of this folder was ever committed")
    complete = [t for t in rep.tags if t.complete]
    if target is not None and target.complete:
        rep.resume_from = target.tag
        return
    older = [t for t in complete if target is None or target.step is None or t.step is None or t.step < target.step]
    rep.resume_from = older[-1].tag if older else None
    if target is not None:
        rep.warnings.append(
            f"{pfile} points at {target.tag}, which is INCOMPLETE ({_why(target)}): "
            + (f"resume from {rep.resume_from} instead" if rep.resume_from else "no complete tag to resume from"))
    elif rep.tags and not rep.tags[-1].complete and rep.kind in ("hf-trainer", "lightning", "torch-dcp"):
        rep.warnings.append(
            f"the newest tag {rep.tags[-1].tag} is INCOMPLETE ({_why(rep.tags[-1])}); resuming from "
            "'the last checkpoint' would pick it: "
            + (f"resume from {rep.resume_from} explicitly" if rep.resume_from else "no complete tag to resume from"))


def _why(t: CheckpointTag) -> str:
    items = [f"missing {m}" for m in t.missing] + t.problems
    return "; ".join(items[:3]) + (f"; +{len(items) - 3} more" if len(items) > 3 else "")
