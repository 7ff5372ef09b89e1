"""The tailer -> engine hand-off, bounded in bytes as well as in items.

A queue bounded only in items holds 1024 chunks: with the pieces of one over-long line
(1 MiB each) that is a gigabyte.  ``put`` waits while more than ``max_bytes`` of chunk data
(or ``max_items`` items) wait for the consumer; one item is always let through, however
big, so nothing can block for ever.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

__all__ = ["ByteQueue"]


def _size(item: Any) -> int:
    data = getattr(item, "data", None)
    return len(data) if isinstance(data, (bytes, bytearray)) else 0


class ByteQueue:
    def __init__(self, max_bytes: int = 16 << 20, max_items: int = 1024) -> None:
        self.max_bytes = max_bytes
        self.max_items = max_items
        self.bytes = 0
        self._items: deque = deque()
        self._room = asyncio.Event()
        self._room.set()
        self._ready = asyncio.Event()

    def _full(self) -> bool:
        return bool(self._items) and (self.bytes >= self.max_bytes or len(self._items) >= self.max_items)

    async def put(self, item: Any) -> None:
        while self._full():
            self._room.clear()
            await self._room.wait()
        self._items.append(item)
        self.bytes += _size(item)
        self._ready.set()

    def empty(self) -> bool:
        return not self._items

    def get_nowait(self) -> Any:
        if not self._items:
            raise asyncio.QueueEmpty
        item = self._items.popleft()
        self.bytes -= _size(item)
        if not self._full():
            self._room.set()
        if not self._items:
            self._ready.clear()
        return item

    async def get(self) -> Any:
        while not self._items:
            await self._ready.wait()
        return self.get_nowait()
