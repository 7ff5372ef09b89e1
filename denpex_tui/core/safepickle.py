"""Read a pickle that holds only plain data, without running anything it says.

``pickle.load`` on an untrusted file runs code: the format's ``GLOBAL``/``STACK_GLOBAL`` opcodes
import any callable and ``REDUCE``/``BUILD``/``INST``/``OBJ``/``NEWOBJ`` call it (a ``__reduce__``
returning ``(os.system, ("...",))`` is enough). Flight Recorder dumps are pickles of dicts, lists,
tuples, strings, numbers, booleans and ``None``. This module never calls :mod:`pickle`'s loader:
:func:`pickletools.genops` splits the bytes into opcodes (it only parses), and a small stack
machine here builds those plain containers and scalars. Every other opcode (imports, calls,
object construction, extension codes, persistent ids, out-of-band buffers) is refused with
:class:`UnsafePickle`, before anything is built from it.

An untrusted file is bounded too: its size (the caller's), the nesting depth of containers, the
number of values built (a memo reference counts the size of what it refers to, so a small file
of references to references cannot stand for an exponential tree), and the length of integers.
"""

from __future__ import annotations

import pickletools

__all__ = ["UnsafePickle", "loads_plain", "MAX_DEPTH", "MAX_VALUES"]

MAX_DEPTH = 64
MAX_VALUES = 5_000_000
MAX_INT_BITS = 256


class UnsafePickle(ValueError):
    """The pickle asks for something other than plain data, or is malformed or too big."""


_MARK = object()

# opcodes that push a scalar: the argument genops parsed, or a constant
_SCALARS = frozenset({
    "NONE", "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG",
    "BINFLOAT", "FLOAT", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE",
    "BINSTRING", "SHORT_BINSTRING", "STRING", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
})
_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
_ALLOWED_OTHER = {
    "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP",
    "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "EMPTY_SET",
    "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "LIST", "DICT", "FROZENSET",
    "APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS",
    "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE", "GET", "BINGET", "LONG_BINGET",
}


class _Box:
    """A container under construction with its depth and the values it holds (for the bounds)."""

    __slots__ = ("obj", "depth", "weight")

    def __init__(self, obj, depth: int = 1, weight: int = 1):
        self.obj, self.depth, self.weight = obj, depth, weight


def _int_ok(v: int) -> int:
    if v.bit_length() > MAX_INT_BITS:
        raise UnsafePickle(f"an integer of {v.bit_length()} bits")
    return v


def loads_plain(data: bytes, *, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES):
    """The plain value a pickle of plain data holds. Raises :class:`UnsafePickle` for anything
    else (a callable, a class, an object), for bytes that are not a whole pickle, and past the
    bounds."""
    m = _Machine(max_depth, max_values)
    try:
        for op, arg, pos in pickletools.genops(data):
            name = op.name
            if name in _SCALARS:
                m.scalar(_CONSTANTS[name] if name in _CONSTANTS else arg)
                continue
            if name not in _ALLOWED_OTHER:
                what = f" ({arg!r:.80})" if arg is not None else ""
                raise UnsafePickle(f"opcode {name}{what} at byte {pos}: not plain data, refused")
            if name == "STOP":
                return m.stop()
            m.op(name, arg)
    except UnsafePickle:
        raise
    except (ValueError, IndexError, KeyError, TypeError, OverflowError, EOFError) as exc:
        raise UnsafePickle(f"not a whole pickle ({type(exc).__name__}: {str(exc)[:80]})") from None
    raise UnsafePickle("not a whole pickle (no STOP)")


def _plain(v):
    return v.obj if isinstance(v, _Box) else v


def _box_of(v) -> _Box:
    return v if isinstance(v, _Box) else _Box(v, 0, 1)


def _hashable(v):
    k = _plain(v)
    if isinstance(k, (list, dict, set)):
        raise UnsafePickle("an unhashable dict key or set item")
    return k


class _Machine:
    """The stack machine: plain containers and scalars only, every value paid from a budget,
    every container's depth checked as it grows."""

    def __init__(self, max_depth: int, max_values: int) -> None:
        self.stack: list = []
        self.memo: dict = {}
        self.max_depth = max_depth
        self.max_values = max_values
        self.budget = max_values

    def charge(self, n: int) -> None:
        self.budget -= n
        if self.budget < 0:
            raise UnsafePickle(f"more than {self.max_values} values")

    def pop_mark(self) -> list:
        stack = self.stack
        items = []
        while stack:
            v = stack.pop()
            if v is _MARK:
                items.reverse()
                return items
            items.append(v)
        raise UnsafePickle("MARK missing")

    def add_to(self, container: _Box, children: list) -> None:
        d = max((_box_of(c).depth for c in children), default=0) + 1
        if d > self.max_depth:
            raise UnsafePickle(f"containers nested deeper than {self.max_depth}")
        container.depth = max(container.depth, d)
        container.weight += sum(_box_of(c).weight for c in children)

    def scalar(self, v) -> None:
        if isinstance(v, int) and not isinstance(v, bool):
            _int_ok(v)
        self.charge(1)
        self.stack.append(v)

    def stop(self):
        if len(self.stack) != 1:
            raise UnsafePickle("malformed: STOP with a stack of %d" % len(self.stack))
        if self.stack[0] is _MARK:  # b"(." : a mark is no value
            raise UnsafePickle("malformed: STOP with only a MARK")
        return _plain(self.stack.pop())

    def op(self, name: str, arg) -> None:
        """One allowed opcode other than a scalar or STOP."""
        stack = self.stack
        if name in ("PROTO", "FRAME"):
            return
        if name == "MARK":
            stack.append(_MARK)
        elif name == "POP":
            stack.pop()
        elif name == "POP_MARK":
            self.pop_mark()
        elif name == "DUP":  # a second reference costs what it refers to, as GET does
            self.charge(_box_of(stack[-1]).weight)
            stack.append(stack[-1])
        elif name in ("EMPTY_DICT", "EMPTY_LIST", "EMPTY_SET"):
            self.charge(1)
            stack.append(_Box({} if name == "EMPTY_DICT" else [] if name == "EMPTY_LIST" else set()))
        elif name == "EMPTY_TUPLE":
            self.charge(1)
            stack.append(())
        elif name in ("TUPLE", "LIST", "FROZENSET", "TUPLE1", "TUPLE2", "TUPLE3", "DICT"):
            self.build(name)
        elif name in ("APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS"):
            self.extend(name)
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            self.memo[int(arg)] = stack[-1]
        elif name == "MEMOIZE":
            self.memo[len(self.memo)] = stack[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            key = int(arg)
            if key not in self.memo:
                raise UnsafePickle(f"malformed: memo {key} unset")
            v = self.memo[key]
            self.charge(_box_of(v).weight)
            stack.append(v)
        if stack and stack[-1] is not _MARK and isinstance(stack[-1], _Box) and stack[-1].depth > self.max_depth:
            raise UnsafePickle(f"containers nested deeper than {self.max_depth}")

    def build(self, name: str) -> None:
        """A new container from the items above the mark (or the top 1-3 for TUPLE1-3)."""
        stack = self.stack
        if name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            if len(stack) < n or any(x is _MARK for x in stack[-n:]):
                raise UnsafePickle(f"malformed: {name}")
            items = stack[-n:]
            del stack[-n:]
        else:
            items = self.pop_mark()
        if name == "DICT" and len(items) % 2:
            raise UnsafePickle("malformed: DICT with an odd number of items")
        b = _Box({} if name == "DICT" else None)
        self.add_to(b, items)
        if name == "LIST":
            b.obj = [_plain(i) for i in items]
        elif name == "FROZENSET":
            b.obj = frozenset(_hashable(i) for i in items)
        elif name == "DICT":
            for i in range(0, len(items), 2):
                b.obj[_hashable(items[i])] = _plain(items[i + 1])
        else:
            b.obj = tuple(_plain(i) for i in items)
        self.charge(1)
        stack.append(b)

    def extend(self, name: str) -> None:
        """Items added to the list, dict or set below them."""
        stack = self.stack
        if name in ("APPEND", "APPENDS"):
            items = [stack.pop()] if name == "APPEND" else self.pop_mark()
            target = stack[-1]
            if not isinstance(target, _Box) or not isinstance(target.obj, list):
                raise UnsafePickle(f"{name} to something that is not a list")
            self.add_to(target, items)
            target.obj.extend(_plain(i) for i in items)
        elif name in ("SETITEM", "SETITEMS"):
            if name == "SETITEM":
                v = stack.pop()
                k = stack.pop()
                items = [k, v]
            else:
                items = self.pop_mark()
            if len(items) % 2:
                raise UnsafePickle("malformed: SETITEMS with an odd number of items")
            target = stack[-1]
            if not isinstance(target, _Box) or not isinstance(target.obj, dict):
                raise UnsafePickle(f"{name} to something that is not a dict")
            self.add_to(target, items)
            for i in range(0, len(items), 2):
                target.obj[_hashable(items[i])] = _plain(items[i + 1])
        else:  # ADDITEMS
            items = self.pop_mark()
            target = stack[-1]
            if not isinstance(target, _Box) or not isinstance(target.obj, set):
                raise UnsafePickle("ADDITEMS to something that is not a set")
            self.add_to(target, items)
            target.obj.update(_hashable(i) for i in items)
