"""Checks on the files of one checkpoint tag that read headers only, never the tensors.

* empty files; unreadable files;
* torch zip archives (``.pt``/``.pth``/``.bin``/``.ckpt``): the central directory at the end
  must be there and point inside the file (a write cut short loses it);
* safetensors: the 8-byte header length, the JSON header, and the data offsets it lists must
  fit in the file;
* temporary/staging names left by an interrupted save (``.metadata.tmp``, ``*.tmp``, ...);
* shards of one kind (one per rank) under half their peers' median size, or under half the
  size the same file has in the folder's other tags.
"""

from __future__ import annotations

import os
import re
import stat
import struct
import zipfile
from statistics import median
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .checkpoints import CheckpointTag

__all__ = ["SMALL", "TEMP", "NotRegular", "open_regular", "file_problem", "walk", "check_files", "peer_sizes",
           "across_tags"]

SMALL = 0.5  # a shard under half the size of its peers (or of itself in other tags) is suspect
TEMP = re.compile(r"(?:\.tmp(?![a-z0-9])|\.part$|\.partial$|\.incomplete$|^tmp[-_.]|^\.~|\.lock$)", re.I)
_ZIPPED = (".pt", ".pth", ".bin", ".ckpt")


class NotRegular(OSError):
    """A FIFO, device or socket where a file was expected (opening a FIFO for reading blocks)."""


def open_regular(path: str):
    """``open(path, "rb")`` that never blocks on a FIFO (or a device): refused unless it is a
    regular file. A hostile folder can hold a FIFO named ``latest`` or ``trainer_state.json``."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(0, "not a regular file (a FIFO, device or socket)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


_SAFETENSORS_HEADER_MAX = 100 << 20
NOT_REGULAR = -2  # walk()'s size of a FIFO, device or socket


def file_problem(path: str, size: int) -> str | None:
    """One line saying what is wrong with a shard's header, or None. Headers are untrusted:
    a safetensors header that is a JSON list, nested without end, or lists absurd offsets is
    "damaged header", never an error of ours."""
    from .untrusted import load_json

    name = os.path.basename(path)
    if size == 0:
        return f"{name}: empty file (0 bytes)"
    try:
        with open_regular(path) as fh:
            head = fh.read(8)
            if name.endswith(".safetensors"):
                if len(head) < 8:
                    return f"{name}: shorter than a safetensors header"
                (n,) = struct.unpack("<Q", head)
                if n > min(size - 8, _SAFETENSORS_HEADER_MAX):
                    return f"{name}: truncated (header of {n} bytes in a {size}-byte file)"
                meta = load_json(fh.read(n), name)
                if not isinstance(meta, dict):
                    raise ValueError("not an object")
                end = max((int(v["data_offsets"][1]) for k, v in meta.items() if k != "__metadata__"), default=0)
                if 8 + n + end > size:
                    return f"{name}: truncated ({size} bytes, its header needs {8 + n + end})"
            elif name.endswith(_ZIPPED) and head[:2] == b"PK":
                try:
                    fh.seek(0)
                    with zipfile.ZipFile(fh) as z:  # reads the central directory only
                        infos = z.infolist()
                    last = max((i.header_offset + i.compress_size for i in infos), default=0)
                    if last > size:
                        return f"{name}: truncated (its zip directory points past the end)"
                except zipfile.BadZipFile:
                    return f"{name}: truncated or damaged (no zip directory at its end)"
    except NotRegular:
        return f"{name}: not a regular file (a FIFO, device or socket)"
    except OSError as exc:
        return f"{name}: unreadable ({exc.strerror or exc})"
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError, OverflowError):
        return f"{name}: damaged header"
    return None


def walk(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for n in sorted(filenames):
            p = os.path.join(dirpath, n)
            try:
                st = os.stat(p)
                out[os.path.relpath(p, path)] = st.st_size if stat.S_ISREG(st.st_mode) else NOT_REGULAR
            except OSError:
                out[os.path.relpath(p, path)] = -1
    return out


def check_files(t: CheckpointTag) -> None:
    t.files = walk(t.path)
    for rel, size in t.files.items():
        base = os.path.basename(rel)
        if size == NOT_REGULAR:
            t.problems.append(f"{rel}: not a regular file (a FIFO, device or socket)")
        elif size < 0:
            t.problems.append(f"{rel}: cannot be read")
        elif TEMP.search(base):
            t.problems.append(f"{rel}: temporary/staging file left by an interrupted save")
        elif not base.endswith(".tensor.swp"):
            p = file_problem(os.path.join(t.path, rel), size)
            if p:
                t.problems.append(p if "/" not in rel else f"{os.path.dirname(rel)}/{p}")


def peer_sizes(t: "CheckpointTag", groups: dict[str, list[str]]) -> None:
    """Shards of one kind (one per rank) of very different sizes: the small ones are suspect
    (each compared with the median of the others)."""
    for label, rels in groups.items():
        present = [r for r in rels if t.files.get(r, 0) > 0]
        if len(present) < 2:
            continue
        for r in present:
            s = t.files[r]
            med = median(t.files[o] for o in present if o != r)
            if s < SMALL * med:
                t.problems.append(f"{r}: {s} bytes, under half of its peers' {int(med)} ({label})")


def across_tags(tags: list[CheckpointTag]) -> None:
    by_name: dict[str, list[int]] = {}
    for t in tags:
        for rel, s in t.files.items():
            if s > 0:
                by_name.setdefault(rel, []).append(s)
    for t in tags:
        for rel, s in t.files.items():
            others = by_name.get(rel, [])
            if s > 0 and len(others) >= 3 and s < SMALL * median(others):
                t.problems.append(f"{rel}: {s} bytes, under half of its size in the other tags ({int(median(others))})")
