"""The tailer -> engine hand-off, bounded in bytes as well as in items.

A queue bounded only in items holds 1024 chunks: with the pieces of one over-long line
(1 MiB each) that is a gigabyte.  ``put`` waits while more than ``max_bytes`` of chunk data
(or ``max_items`` items) wait for the consumer; one item is always let through, however
big, so nothing can block for ever.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["ByteQueue"]


def _size(item: Any) -> int:
    data = getattr(item, "data", None)
    return len(data) if isinstance(data, (bytes, bytearray)) else 0


class ByteQueue:
    """An ``asyncio.Queue`` (its cancellation-safe ``get``, as ``wait_for`` needs) whose
    ``put`` also waits while ``max_bytes`` of chunk data are queued."""

    def __init__(self, max_bytes: int = 16 << 20, max_items: int = 1024) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._q: asyncio.Queue = asyncio.Queue(maxsize=max_items)
        self._room = asyncio.Event()
        self._room.set()

    async def put(self, item: Any) -> None:
        while self.bytes >= self.max_bytes and not self._q.empty():
            self._room.clear()
            await self._room.wait()
        self.bytes += _size(item)
        await self._q.put(item)

    def empty(self) -> bool:
        return self._q.empty()

    def _took(self, item: Any) -> Any:
        self.bytes -= _size(item)
        if self.bytes < self.max_bytes:
            self._room.set()
        return item

    def get_nowait(self) -> Any:
        return self._took(self._q.get_nowait())

    async def get(self) -> Any:
        return self._took(await self._q.get())
