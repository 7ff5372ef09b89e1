"""Numbers for people: byte sizes and counts, shared by every view (text, JSON notes, TUI)."""

from __future__ import annotations

__all__ = ["human_bytes", "human_count"]


def human_bytes(n: int | float | None) -> str:
    """1536 -> '1.5 KiB'; None -> '?' (a reading we could not take is never shown as 0)."""
    if n is None:
        return "?"
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(v) < 1024 or unit == "PiB":
            return f"{int(v)} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} PiB"  # pragma: no cover


def human_count(n: int | None) -> str:
    """12345 -> '12.3 k', 3100000 -> '3.1 M'; None -> '?'."""
    if n is None:
        return "?"
    if n < 10_000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f} k"
    return f"{n / 1e6:.1f} M"
