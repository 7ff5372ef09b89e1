"""``denpex footprint``: the NVMe bytes ZeRO-Infinity will write, per rank and per node.

Pure arithmetic from a DeepSpeed config, a parameter count and the job shape; the free space
is measured by the caller (probes) and compared in :func:`judge`. It follows DeepSpeed's own
code (line numbers at v0.19.8, the same at the HEAD read for failure-messages.md):

* ``deepspeed/runtime/zero/stage3.py:840``: the swap root is ``<nvme_path>/zero_stage_3``
  (NVMe offload exists only in ZeRO stage 3).
* ``stage3.py:1210-1233`` (``_create_fp16_sub_groups``): the rank's partition, ``P/W`` elements,
  is cut into sub-groups of about ``sub_group_size`` elements; ``:1264-1269``: each sub-group of
  at least 1 MiB is swapped.
* ``runtime/swap_tensor/optimizer_utils.py:174``: ``<root>/optimizer/rank<R>/``;
  ``:30-33`` (``SwapTensorContext``): one ``<id>.tensor.swp`` file per tensor of a sub-group:
  the fp32 master partition plus each optimizer state tensor (Adam: ``exp_avg``,
  ``exp_avg_sq``); ``:106``: fp32 gradient files ``<id>_gradient_<offset>_<length>.tensor.swp``
  (``stage3.py:1459-1464``); ``:180-182`` and ``:545-547``: sizes rounded up to
  ``1024 * intra_op_parallelism`` bytes (``swap_tensor/utils.py:14-15``).
* ``runtime/swap_tensor/partitioned_param_swapper.py:86-89``: parameters in
  ``<nvme_path>/zero_stage_3/<dtype>params/rank<R>/<id>_param.tensor.swp`` (fp16/bf16: 2 bytes),
  folder emptied at start; ``:104-106, 124``: ``buffer_count * buffer_size`` elements of pinned
  host memory; ``runtime/zero/partition_parameters.py:1820-1823``: every partition of at least
  1 MiB gets a swap file (``max_in_cpu``, ``stage3.py:898-900``, keeps up to that many elements
  per rank in host memory as well: an upper bound here).
* ``optimizer_utils.py:177-188``: the optimizer's swap buffers: ``buffer_count`` buffers of the
  largest sub-group partition, fp32, pinned host memory.
* ``runtime/engine.py:4938-4949``: each ``save_checkpoint`` copies the optimizer swap folder
  except the gradient files into ``<save_dir>/<tag>/offloaded_tensors/rank<NN>/``.
* ``runtime/zero/offload_config.py:33-39, 67``: defaults ``buffer_count`` 5 (param) and
  4 (optimizer), ``buffer_size`` 1e8, ``max_in_cpu`` 1e9; ``zero/config.py:182``:
  ``sub_group_size`` 1e9.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Footprint", "FootprintError", "compute", "parse_count", "load_config", "judge", "SOURCES"]

SCHEMA = 1
AIO_ALIGNED_BYTES = 1024  # swap_tensor/utils.py:15
MIN_AIO_BYTES = 1 << 20  # swap_tensor/utils.py:14
STATES = {"adam": 2, "adamw": 2, "fusedadam": 2, "cpuadam": 2, "deepspeedcpuadam": 2, "onebitadam": 2,
          "zerooneadam": 2, "lamb": 2, "fusedlamb": 2, "onebitlamb": 2, "lion": 1, "fusedlion": 1,
          "adagrad": 1, "cpuadagrad": 1, "sgd": 1, "muon": 1}
SOURCES = [
    "deepspeed/runtime/zero/stage3.py:840 (zero_stage_3 swap root), :1210-1233 (sub-groups), "
    ":1264-1269 (which sub-groups swap), :1459-1464 (gradient swap)",
    "deepspeed/runtime/swap_tensor/optimizer_utils.py:30-33 (a file per tensor), :106 (gradient files), "
    ":174 (optimizer/rank<R>), :177-188 (alignment, swap buffers), :545-547 (aligned numel)",
    "deepspeed/runtime/swap_tensor/partitioned_param_swapper.py:86-89 (<dtype>params/rank<R>), :104-106, 124 (buffers)",
    "deepspeed/runtime/zero/partition_parameters.py:1820-1823 (partitions >= 1 MiB go to NVMe)",
    "deepspeed/runtime/engine.py:4938-4949 (offloaded_tensors copy per checkpoint tag, gradient files excluded)",
    "deepspeed/runtime/zero/offload_config.py:33-39, 67 and zero/config.py:182 (defaults)",
]


class FootprintError(ValueError):
    pass


_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbt]?)\s*$", re.I)


def parse_count(s: str | int | float) -> int:
    """'7e9', '7B', '125M', 7000000000 -> an element count."""
    if isinstance(s, (int, float)):
        v = float(s)
    else:
        m = _COUNT.match(str(s).replace("_", "").replace(",", ""))
        if not m:
            raise FootprintError(f"{s!r} is not a parameter count (7e9, 7B, 125M)")
        v = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[m.group(2).lower()]
    if not math.isfinite(v) or v < 1:
        raise FootprintError(f"{s!r} is not a positive parameter count")
    return int(round(v))


def load_config(path: str) -> dict:
    import json

    try:
        with open(path, "rb") as fh:
            data = fh.read(16 << 20)
        cfg = json.loads(data)
    except OSError as exc:
        raise FootprintError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise FootprintError(f"{path}: not JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise FootprintError(f"{path}: not a JSON object")
    return cfg


def _aligned(numel: int, elem: int, intra: int) -> int:
    align = max(1, AIO_ALIGNED_BYTES * intra // elem)
    r = numel % align
    return numel if r == 0 else numel + align - r


def _num(v: Any, default: float, name: str, notes: list[str]) -> float:
    if v is None:
        return default
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            notes.append(f"{name} = {v!r}: the default {default:g} is assumed")
            return default
    return float(v)


@dataclass
class Footprint:
    inputs: dict[str, Any]
    per_rank: dict[str, int]
    per_node: dict[str, int] | None
    job: dict[str, int]
    checkpoint_copy: dict[str, int | None]
    pinned_host_per_rank: dict[str, int]
    formula: list[str]
    nvme_paths: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "inputs": self.inputs, "per_rank": self.per_rank, "per_node": self.per_node,
                "job": self.job, "checkpoint_copy_per_tag": self.checkpoint_copy,
                "pinned_host_per_rank": self.pinned_host_per_rank, "nvme_paths": self.nvme_paths,
                "formula": self.formula, "sources": SOURCES, "notes": self.notes, "warnings": self.warnings}


def compute(cfg: dict, params: int, world_size: int, nodes: int | None = None,
            optimizer: str | None = None) -> Footprint:
    if world_size < 1:
        raise FootprintError("--world-size must be at least 1")
    if nodes is not None and (nodes < 1 or nodes > world_size):
        raise FootprintError("--nodes must be between 1 and the world size")
    notes: list[str] = []
    warnings: list[str] = []
    zero = cfg.get("zero_optimization") or {}
    if not isinstance(zero, dict):
        raise FootprintError("zero_optimization is not an object")
    stage = int(_num(zero.get("stage"), 0, "zero_optimization.stage", notes))
    oo = zero.get("offload_optimizer") or {}
    op = zero.get("offload_param") or {}
    opt_nvme = isinstance(oo, dict) and oo.get("device") == "nvme"
    par_nvme = isinstance(op, dict) and op.get("device") == "nvme"
    if not (opt_nvme or par_nvme):
        raise FootprintError("the config offloads nothing to NVMe (zero_optimization.offload_optimizer/offload_param "
                             "device is not \"nvme\")")
    if stage != 3:
        warnings.append(f"NVMe offload needs ZeRO stage 3 (the config says stage {stage}): DeepSpeed will not swap")
    aio = cfg.get("aio") or {}
    intra = int(_num(aio.get("intra_op_parallelism", aio.get("thread_count")), 1, "aio.intra_op_parallelism", notes))
    sub = int(_num(zero.get("sub_group_size"), 1e9, "sub_group_size", notes))
    half = any(isinstance(cfg.get(k), dict) and cfg[k].get("enabled") in (True, "auto") for k in ("bf16", "fp16"))
    if any(isinstance(cfg.get(k), dict) and cfg[k].get("enabled") == "auto" for k in ("bf16", "fp16")):
        notes.append("bf16/fp16 enabled = \"auto\": 16-bit parameters assumed")
    p_elem = 2 if half else 4
    oname = optimizer or ((cfg.get("optimizer") or {}).get("type") if isinstance(cfg.get("optimizer"), dict) else None)
    if oname is None:
        notes.append("no optimizer in the config (a client optimizer): Adam's 2 states per parameter assumed; "
                     "use --optimizer")
        oname = "Adam"
    key = re.sub(r"[^a-z0-9]", "", str(oname).lower())
    k = STATES.get(key)
    if k is None:
        k = 2
        notes.append(f"optimizer {oname!r} is not known here: 2 states per parameter assumed")
    if opt_nvme and oo.get("ratio") not in (None, 1, 1.0):
        notes.append("offload_optimizer.ratio is the partial CPU offload split, not an NVMe one: ignored here")

    pr = math.ceil(params / world_size)  # elements of the rank's partition
    n_sub = max(1, math.ceil(pr / sub))
    largest = min(pr, sub)
    # every sub-group of at least 1 MiB is swapped (stage3.py:1264-1269)
    n_swapped = n_sub if opt_nvme and largest * 4 >= MIN_AIO_BYTES else 0
    swapped_numel = pr if n_swapped else 0
    opt_state = swapped_numel * 4 * (1 + k)  # fp32 master + k fp32 states
    grads = swapped_numel * 4
    par = pr * p_elem if par_nvme else 0
    per_rank = {"optimizer_state_bytes": opt_state, "gradient_bytes": grads, "param_bytes": par,
                "nvme_bytes": opt_state + grads + par,
                "files_min": n_swapped * (1 + k) + n_swapped + (1 if par_nvme else 0)}
    rpn = None
    if nodes:
        rpn = math.ceil(world_size / nodes)
        if world_size % nodes:
            warnings.append(f"{world_size} ranks do not split evenly over {nodes} nodes: the fullest node has {rpn}")
    per_node = {k2: v * rpn for k2, v in per_rank.items()} if rpn else None
    job = {k2: v * world_size for k2, v in per_rank.items()}
    ck = {"per_rank": opt_state, "per_node": opt_state * rpn if rpn else None, "job": opt_state * world_size}
    pb = int(_num(op.get("buffer_count"), 5, "offload_param.buffer_count", notes))
    ps = int(_num(op.get("buffer_size"), 1e8, "offload_param.buffer_size", notes))
    ob = int(_num(oo.get("buffer_count"), 4, "offload_optimizer.buffer_count", notes))
    pinned = {"param_buffers": pb * _aligned(ps, p_elem, intra) * p_elem if par_nvme else 0,
              "optimizer_buffers": ob * _aligned(largest, 4, intra) * 4 if opt_nvme else 0}
    if par_nvme and ps * p_elem < MIN_AIO_BYTES:
        warnings.append("offload_param.buffer_size is under 1 MiB: no parameter is large enough to be swapped")
    W, P = world_size, params
    formula = [
        f"partition per rank  Pr = ceil(P / W) = ceil({P} / {W}) = {pr} elements",
        f"optimizer state     = Pr x 4 B x (1 master + {k} {oname} states) = {opt_state} B",
        f"fp32 gradients      = Pr x 4 B = {grads} B" if opt_nvme else "fp32 gradients      = 0 (optimizer not on NVMe)",
        f"parameters          = Pr x {p_elem} B = {par} B (upper bound: max_in_cpu may keep some in host memory)"
        if par_nvme else "parameters          = 0 (offload_param not on NVMe)",
        f"NVMe per rank       = {per_rank['nvme_bytes']} B" + (f"; per node (x {rpn} ranks) = {per_node['nvme_bytes']} B" if rpn else ""),
        f"checkpoint copy     = optimizer state per rank per tag (offloaded_tensors/, gradients excluded) = {opt_state} B",
        f"pinned host memory  = param {pb} x aligned({ps}) x {p_elem} B + optimizer {ob} x aligned({largest}) x 4 B "
        f"= {pinned['param_buffers']} + {pinned['optimizer_buffers']} B (host RAM, not NVMe)",
    ]
    paths: dict[str, list[str]] = {}
    if opt_nvme:
        if not oo.get("nvme_path"):
            raise FootprintError("offload_optimizer.device is nvme but nvme_path is not set")
        paths.setdefault(str(oo["nvme_path"]), []).append("offload_optimizer")
    if par_nvme:
        if not op.get("nvme_path"):
            raise FootprintError("offload_param.device is nvme but nvme_path is not set")
        paths.setdefault(str(op["nvme_path"]), []).append("offload_param")
    nvme = []
    for p, roles in paths.items():
        need = (opt_state + grads if "offload_optimizer" in roles else 0) + (par if "offload_param" in roles else 0)
        nvme.append({"path": p, "roles": roles, "per_rank_bytes": need,
                     "per_node_bytes": need * rpn if rpn else None, "job_bytes": need * W})
        if len(roles) > 1:
            warnings.append(f"offload_param and offload_optimizer share {p}: both count against one filesystem")
    if rpn and rpn > 1:
        notes.append(f"the {rpn} ranks of a node all write under the same nvme_path (rank<R> subfolders): "
                     "the per-node figure is what one node's device must hold")
    inputs = {"params": P, "world_size": W, "nodes": nodes, "ranks_per_node": rpn, "zero_stage": stage,
              "optimizer": oname, "states_per_param": k, "param_bytes_per_element": p_elem,
              "sub_group_size": sub, "sub_groups_per_rank": n_sub,
              "intra_op_parallelism": intra}
    return Footprint(inputs, per_rank, per_node, job, ck, pinned, formula, nvme, notes, warnings)


def judge(fp: Footprint, readings: dict[str, Any]) -> None:
    """Put the free bytes/inodes measured now next to what each nvme_path must hold; warn
    when it does not fit or when the path is shared between nodes (network/parallel fs)."""
    for entry in fp.nvme_paths:
        r = readings.get(entry["path"])
        if r is None:
            continue
        entry["measured"] = r.to_json() if hasattr(r, "to_json") else r
        rj = entry["measured"]
        free, ifree = rj.get("bytes_free"), rj.get("inodes_free")
        shared = rj.get("fs_class") in ("network", "parallel") or bool(rj.get("network_fs"))
        need = entry["job_bytes"] if shared else (entry["per_node_bytes"] or entry["per_rank_bytes"])
        files = fp.per_rank["files_min"] * (fp.inputs["world_size"] if shared else (fp.inputs["ranks_per_node"] or 1))
        entry["compared_bytes"] = need
        entry["shared_between_nodes"] = shared
        if shared:
            fp.warnings.append(f"{entry['path']} is on a {rj.get('fstype') or 'network'} filesystem shared by "
                               f"the nodes: all {fp.inputs['world_size']} ranks write to it ({need} B)")
        if rj.get("error") or rj.get("exists") is False:
            fp.warnings.append(f"{entry['path']} does not exist on this node ({rj.get('error') or 'measured its nearest parent'}): "
                               "measure it on a compute node")
        if free is not None and need > free:
            fp.warnings.append(f"{entry['path']}: needs {need} B, {free} B free now: it does not fit")
        if ifree is not None and files > ifree:
            fp.warnings.append(f"{entry['path']}: needs at least {files} files, {ifree} inodes free now")
        entry["fits"] = None if free is None else need <= free
