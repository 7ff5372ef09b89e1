"""``du`` of a filesystem, bounded, and the df - du gap it gives: space held by files that
were deleted while still open (the DeepSpeed FastFileWriter leak) shows as df used above du.

The walk stays on one device, counts each inode once, and stops (``du_bytes`` None,
"capped") past ``max_entries`` entries or ``max_seconds``: never a partial number.  Results
are cached for ``DU_TTL`` seconds per mount.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from .readings import PathReading

__all__ = ["DuResult", "DU_TTL", "clear_du_cache", "du_filesystem", "df_du_gap"]


@dataclass
class DuResult:
    du_bytes: int | None
    entries: int
    reason: str | None  # why du_bytes is None (capped, unreadable, network...)
    at: float


_DU_CACHE: dict[tuple[str, int | None], DuResult] = {}
DU_TTL = 30.0


def clear_du_cache() -> None:
    _DU_CACHE.clear()


def du_filesystem(mount_point: str, *, max_entries: int = 100_000, max_seconds: float = 2.0,
                  use_cache: bool = True) -> DuResult:
    """Allocated bytes (st_blocks * 512) of everything reachable under ``mount_point`` on the
    same device, each inode once. Bounded: past ``max_entries`` entries or ``max_seconds`` the
    walk stops and ``du_bytes`` is None ("capped"), never a partial number."""
    now = time.time()
    try:
        root_dev = os.stat(mount_point).st_dev
    except OSError as e:
        return DuResult(None, 0, f"cannot stat {mount_point}: {e.strerror}", now)
    key = (mount_point, root_dev)
    if use_cache:
        c = _DU_CACHE.get(key)
        if c is not None and now - c.at < DU_TTL:
            return c
    t0 = time.monotonic()
    total = 0
    entries = 0
    seen: set[int] = set()
    stack = [mount_point]
    try:
        total += os.stat(mount_point).st_blocks * 512
    except OSError:
        pass
    reason = None
    while stack and reason is None:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except PermissionError:
            reason = f"permission denied: {d}"
            break
        except FileNotFoundError:
            continue  # removed while walking
        except OSError as e:
            reason = f"cannot read {d}: {e.strerror}"
            break
        with it:
            for e in it:
                entries += 1
                if entries > max_entries:
                    reason = f"capped at {max_entries} entries"
                    break
                if (entries & 1023) == 0 and time.monotonic() - t0 > max_seconds:
                    reason = f"capped at {max_seconds:g} s"
                    break
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                except OSError:
                    continue
                if st.st_dev != root_dev:
                    continue  # another filesystem mounted below
                if st.st_nlink > 1 and not e.is_dir(follow_symlinks=False):
                    if st.st_ino in seen:
                        continue
                    seen.add(st.st_ino)
                total += st.st_blocks * 512
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    res = DuResult(None if reason else total, entries, reason, now)
    _DU_CACHE[key] = res
    return res


def df_du_gap(reading: PathReading, source=None, **kw) -> tuple[float | None, DuResult | None, str | None]:
    """(gap in % of total, du result, reason when None). ``source``: the ProbeSource whose node
    the reading is of (its ``du``); default this machine."""
    if reading.error or reading.bytes_used is None or not reading.bytes_total:
        return None, None, reading.error or "no reading"
    if reading.network_fs:
        return None, None, "network filesystem: not walked"
    if reading.mount is None:
        return None, None, "mount unknown"
    if not os.path.isabs(reading.mount):  # a label, not a mount point ('demo disk (simulated by --demo)')
        return None, None, f"{reading.mount}: not a mounted filesystem, nothing for du to walk"
    if reading.mount_root not in (None, "/"):
        return None, None, "bind mount of a subtree: du cannot see the whole filesystem"
    du = source.du(reading.mount) if source is not None else du_filesystem(reading.mount, **kw)
    if du.du_bytes is None:
        return None, du, du.reason
    gap = max(0, reading.bytes_used - du.du_bytes)
    return 100.0 * gap / reading.bytes_total, du, None
