"""``footprint --from-logs``: the DeepSpeed config and parameter count as the logs print them.

DeepSpeed's config echo (failure-messages.md A7; ``runtime/config.py`` ``DeepSpeedConfig.print``,
rank 0, at INFO)::

    [...] [INFO] [config.py:678:print]   zero_config .................. stage=3 ... offload_param=
      DeepSpeedZeroOffloadParamConfig(device='nvme', nvme_path=PosixPath('/local_nvme'), buffer_count=5,
      buffer_size=2000000, max_in_cpu=0, pin_memory=True) offload_optimizer=DeepSpeedZeroOffload
      OptimizerConfig(device='nvme', ...) ... sub_group_size=1000000000 ...
    [...]   aio_config ................... {'block_size': 1048576, 'queue_depth': 8, ...}
    [...]   bfloat16_config .............. enabled=False ...
    [...]   optimizer_name ............... adamw
    [...]   world_size ................... 2

is turned back into the ``ds_config.json`` keys :func:`footprint.compute` reads. The parameter
count is taken from the lines trainers print: HF Trainer's ``Number of trainable parameters =
N``, Lightning's ``N  Total params``, Megatron's ``number of parameters on (tensor, pipeline)
model parallel rank (t, p): N`` (summed over the distinct model-parallel ranks), or a script's
``N parameters``.
"""

from __future__ import annotations

import ast
import re

from .lines.reader import SourceError, read_lines
from .text import safe_line

__all__ = ["config_from_logs"]

_ECHO = re.compile(r"\]\s+(\w+) \.{2,} (.*)$")
_KEYS = {"zero_config", "aio_config", "bfloat16_config", "float16_config", "optimizer_name", "world_size"}
_KV = re.compile(r"(\w+)=((?:PosixPath\()?'[^']*'\)?|<[^>]*>|[^\s,()]+)")
_HF = re.compile(r"Number of trainable parameters = ([\d,]+)")
_MEG = re.compile(r"number of parameters on \(tensor, pipeline\) model parallel rank \((\d+), (\d+)\): (\d+)")
_LIGHT = re.compile(r"^\s*([\d.]+)\s*([KMBT]?)\s+Total params\b")
_PLAIN = re.compile(r"\b(\d{4,})\s+(?:trainable\s+)?parameters\b")
_MAX_LINE = 64 << 10
_OBJ = re.compile(r"print_object\]\s+(\w+):\s*$")  # swap_tensor/utils.py print_object, rank 0 (A8)
_SWAPPERS = {"AsyncPartitionedParameterSwapper", "PartitionedOptimizerSwapper", "PipelinedOptimizerSwapper"}
_SPACED_KV = re.compile(r"(\w+)=((?:PosixPath\()?'[^']*'\)?|\S+)")


def _value(v: str):
    v = v.rstrip(",")
    if re.match(r"^\d{1,3}(?:,\d{3})+$", v):  # 100,000,000 (older DeepSpeed)
        v = v.replace(",", "")
    m = re.match(r"^(?:PosixPath\()?'([^']*)'\)?$", v)
    if m:
        return m.group(1)
    m = re.match(r"^<\w+\.(\w+): '([^']*)'>$", v)  # an enum repr
    if m:
        return m.group(2)
    if v in ("True", "False"):
        return v == "True"
    if v == "None":
        return None
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def _offload(zero: str, key: str) -> dict | None:
    i = zero.find(key + "=")
    if i < 0:
        return None
    rest = zero[i + len(key) + 1:]
    if rest.startswith("None"):
        return None
    j = rest.find("(")
    if j < 0:
        return None
    depth, k = 0, j
    for k in range(j, len(rest)):
        depth += {"(": 1, ")": -1}.get(rest[k], 0)
        if depth == 0:
            break
    return {m.group(1): _value(m.group(2)) for m in _KV.finditer(rest[j + 1:k])}


def _lines(path: str):
    """(line number, raw) through the one reader (bounded lines, gzip, UTF-16); a file it refuses
    (binary, unreadable) gives no lines: the others may still hold the config."""
    try:
        for n, _off, raw in read_lines(path):
            yield n, raw
    except SourceError:
        return


def config_from_logs(paths: list[str]) -> tuple[dict, int | None, int | None, list[str]]:
    """(ds_config, parameter count or None, world size or None, where each came from)."""
    echo: dict[str, tuple[str, str]] = {}
    params = None
    meg: dict[tuple[int, int], int] = {}
    where: list[str] = []
    swappers: dict[str, dict] = {}
    for path in paths:
        block = None
        for n, raw in _lines(path):
            text = safe_line(raw.rstrip(b"\r")[:_MAX_LINE]).text
            b = _OBJ.search(text)
            if b:
                block = b.group(1)
                continue
            m = _ECHO.search(text)
            if m and block in _SWAPPERS and "print_object" in text:
                swappers.setdefault(block, {}).setdefault(m.group(1), (m.group(2), f"{path}:{n}"))
                continue
            if "print_object" not in text:
                block = None
            if m and m.group(1) in _KEYS and m.group(1) not in echo:
                echo[m.group(1)] = (m.group(2), f"{path}:{n}")
                continue
            if params is None:
                if (h := _HF.search(text)) is not None:
                    params, src = int(h.group(1).replace(",", "")), f"{path}:{n}"
                    where.append(f"parameters from {src}")
                elif (lt := _LIGHT.search(text)) is not None:
                    mult = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}[lt.group(2)]
                    params = int(float(lt.group(1)) * mult)
                    where.append(f"parameters from {path}:{n} (Lightning's rounded summary)")
                elif (p := _PLAIN.search(text)) is not None:
                    params = int(p.group(1))
                    where.append(f"parameters from {path}:{n}")
            if (mm := _MEG.search(text)) is not None:
                meg.setdefault((int(mm.group(1)), int(mm.group(2))), int(mm.group(3)))
    if meg:
        params = sum(meg.values())
        where.append(f"parameters: the sum over {len(meg)} model-parallel ranks' Megatron counts")
    if "zero_config" not in echo:
        if not swappers:
            raise ValueError("no DeepSpeed config echo (zero_config ....) in these logs: DeepSpeed prints it at "
                             "INFO on rank 0 (\"log_level\": \"info\"); use --config")
        return _from_swappers(swappers, echo, params, where)
    zero_text, src = echo["zero_config"]
    where.append(f"zero_config from {src}")
    zero: dict = {}
    st = re.search(r"\bstage=(\d+)", zero_text)
    if st:
        zero["stage"] = int(st.group(1))
    sg = re.search(r"\bsub_group_size=(\d+)", zero_text)
    if sg:
        zero["sub_group_size"] = int(sg.group(1))
    for key in ("offload_optimizer", "offload_param"):
        o = _offload(zero_text, key)
        if o is not None:
            zero[key] = o
    cfg: dict = {"zero_optimization": zero}
    if "aio_config" in echo:
        try:
            aio = ast.literal_eval(echo["aio_config"][0])
            if isinstance(aio, dict):
                cfg["aio"] = aio
        except (ValueError, SyntaxError):
            pass
    for key, name in (("bfloat16_config", "bf16"), ("float16_config", "fp16")):
        if key in echo:
            cfg[name] = {"enabled": re.search(r"\benabled=True\b", echo[key][0]) is not None}
    if "optimizer_name" in echo and echo["optimizer_name"][0].strip() not in ("None", ""):
        cfg["optimizer"] = {"type": echo["optimizer_name"][0].strip()}
    world = None
    if "world_size" in echo and echo["world_size"][0].strip().isdigit():
        world = int(echo["world_size"][0].strip())
        where.append(f"world_size from {echo['world_size'][1]}")
    return cfg, params, world, where


def _from_swappers(swappers: dict, echo: dict, params, where: list[str]):
    """No config echo (a run that died in its first swap, before the engine printed it): the
    swappers' own dumps. NVMe swapping exists only in ZeRO stage 3."""
    zero: dict = {"stage": 3}
    cfg: dict = {"zero_optimization": zero}
    for name, obj in swappers.items():
        key = "offload_param" if name == "AsyncPartitionedParameterSwapper" else "offload_optimizer"
        if "swap_config" in obj:
            text, src = obj["swap_config"]
            zero[key] = {m.group(1): _value(m.group(2)) for m in _SPACED_KV.finditer(text)}
            where.append(f"{key} from DeepSpeed's {name} dump at {src}")
        if "aio_config" in obj and "aio" not in cfg:
            try:
                cfg["aio"] = ast.literal_eval(obj["aio_config"][0])
            except (ValueError, SyntaxError):
                pass
        folder = obj.get("swap_folder", ("", ""))[0]
        dt = re.search(r"/zero_stage_3/(\w+?)params/", folder)
        if key == "offload_param" and dt:
            cfg["bf16" if dt.group(1) == "bfloat16" else "fp16"] = {"enabled": dt.group(1) in ("float16", "bfloat16")}
    if "offload_param" not in zero:
        where.append("offload_param: not in the logs (its swapper prints before DeepSpeed's log level is set); "
                     "parameters not counted: use --config for them")
    if "optimizer_name" in echo and echo["optimizer_name"][0].strip() not in ("None", ""):
        cfg["optimizer"] = {"type": echo["optimizer_name"][0].strip()}
    return cfg, params, None, where
