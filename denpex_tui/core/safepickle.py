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
    stack: list = []
    memo: dict = {}
    budget = [max_values]

    def charge(n: int) -> None:
        budget[0] -= n
        if budget[0] < 0:
            raise UnsafePickle(f"more than {max_values} values")

    def box_of(v) -> _Box:
        return v if isinstance(v, _Box) else _Box(v, 0, 1)

    def pop_mark() -> list:
        items = []
        while stack:
            v = stack.pop()
            if v is _MARK:
                items.reverse()
                return items
            items.append(v)
        raise UnsafePickle("MARK missing")

    def add_to(container: _Box, children: list) -> None:
        d = max((box_of(c).depth for c in children), default=0) + 1
        if d > max_depth:
            raise UnsafePickle(f"containers nested deeper than {max_depth}")
        container.depth = max(container.depth, d)
        container.weight += sum(box_of(c).weight for c in children)

    def plain(v):
        return v.obj if isinstance(v, _Box) else v

    def hashable(v):
        k = plain(v)
        if isinstance(k, (list, dict, set)):
            raise UnsafePickle("an unhashable dict key or set item")
        return k

    try:
        ops = pickletools.genops(data)
        for op, arg, pos in ops:
            name = op.name
            if name in _SCALARS:
                v = _CONSTANTS[name] if name in _CONSTANTS else arg
                if isinstance(v, int) and not isinstance(v, bool):
                    _int_ok(v)
                charge(1)
                stack.append(v)
                continue
            if name not in _ALLOWED_OTHER:
                what = f" ({arg!r:.80})" if arg is not None else ""
                raise UnsafePickle(f"opcode {name}{what} at byte {pos}: not plain data, refused")
            if name in ("PROTO", "FRAME"):
                continue
            if name == "STOP":
                if len(stack) != 1:
                    raise UnsafePickle("malformed: STOP with a stack of %d" % len(stack))
                return plain(stack.pop())
            if name == "MARK":
                stack.append(_MARK)
            elif name == "POP":
                stack.pop()
            elif name == "POP_MARK":
                pop_mark()
            elif name == "DUP":  # a second reference costs what it refers to, as GET does
                charge(box_of(stack[-1]).weight)
                stack.append(stack[-1])
            elif name in ("EMPTY_DICT", "EMPTY_LIST", "EMPTY_SET"):
                charge(1)
                stack.append(_Box({} if name == "EMPTY_DICT" else [] if name == "EMPTY_LIST" else set()))
            elif name == "EMPTY_TUPLE":
                charge(1)
                stack.append(())
            elif name in ("TUPLE", "LIST", "FROZENSET"):
                items = pop_mark()
                b = _Box(None)
                add_to(b, items)
                if name == "TUPLE":
                    b.obj = tuple(plain(i) for i in items)
                elif name == "LIST":
                    b.obj = [plain(i) for i in items]
                else:
                    b.obj = frozenset(hashable(i) for i in items)
                charge(1)
                stack.append(b)
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                if len(stack) < n or any(x is _MARK for x in stack[-n:]):
                    raise UnsafePickle(f"malformed: {name}")
                items = stack[-n:]
                del stack[-n:]
                b = _Box(None)
                add_to(b, items)
                b.obj = tuple(plain(i) for i in items)
                charge(1)
                stack.append(b)
            elif name == "DICT":
                items = pop_mark()
                if len(items) % 2:
                    raise UnsafePickle("malformed: DICT with an odd number of items")
                b = _Box({})
                add_to(b, items)
                for i in range(0, len(items), 2):
                    b.obj[hashable(items[i])] = plain(items[i + 1])
                charge(1)
                stack.append(b)
            elif name in ("APPEND", "APPENDS"):
                items = [stack.pop()] if name == "APPEND" else pop_mark()
                target = stack[-1]
                if not isinstance(target, _Box) or not isinstance(target.obj, list):
                    raise UnsafePickle(f"{name} to something that is not a list")
                add_to(target, items)
                target.obj.extend(plain(i) for i in items)
            elif name in ("SETITEM", "SETITEMS"):
                if name == "SETITEM":
                    v = stack.pop()
                    k = stack.pop()
                    items = [k, v]
                else:
                    items = pop_mark()
                if len(items) % 2:
                    raise UnsafePickle("malformed: SETITEMS with an odd number of items")
                target = stack[-1]
                if not isinstance(target, _Box) or not isinstance(target.obj, dict):
                    raise UnsafePickle(f"{name} to something that is not a dict")
                add_to(target, items)
                for i in range(0, len(items), 2):
                    target.obj[hashable(items[i])] = plain(items[i + 1])
            elif name == "ADDITEMS":
                items = pop_mark()
                target = stack[-1]
                if not isinstance(target, _Box) or not isinstance(target.obj, set):
                    raise UnsafePickle("ADDITEMS to something that is not a set")
                add_to(target, items)
                target.obj.update(hashable(i) for i in items)
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[int(arg)] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                key = int(arg)
                if key not in memo:
                    raise UnsafePickle(f"malformed: memo {key} unset")
                v = memo[key]
                charge(box_of(v).weight)
                stack.append(v)
            if stack and stack[-1] is not _MARK and isinstance(stack[-1], _Box) and stack[-1].depth > max_depth:
                raise UnsafePickle(f"containers nested deeper than {max_depth}")
    except UnsafePickle:
        raise
    except (ValueError, IndexError, KeyError, TypeError, OverflowError, EOFError) as exc:
        raise UnsafePickle(f"not a whole pickle ({type(exc).__name__}: {str(exc)[:80]})") from None
    raise UnsafePickle("not a whole pickle (no STOP)")
