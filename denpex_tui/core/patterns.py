"""The pattern engine: linear-time regular expressions and the literal prefilter.

Signature patterns are written in the subset of Python ``re`` syntax that RE2 also accepts,
and they run on RE2 (``google-re2``), whose matching time is linear in the line length
whatever the pattern: a crafted log line cannot make a user's signature pack hang a scan.
Python ``re`` is used only to *parse* a pattern (to find its required literal) and, when
``google-re2`` is not installed, to run patterns that pass a structural check refusing the
constructs that backtrack catastrophically (nested or adjacent unbounded quantifiers).

The prefilter finds candidate lines in whole chunks without looking at lines one by one:
every pattern must contain a literal run of at least :data:`MIN_LITERAL` characters that any
match must contain; all literals go into one multi-literal automaton (Hyperscan when
available, else one RE2 alternation), and full patterns run only on lines holding a literal.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from typing import Callable, Iterable

from .hscache import hyperscan_database

try:  # Python 3.11+
    import re._parser as _sre_parse  # type: ignore[import-not-found]
    import re._constants as _sre_const  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_const  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

try:
    import re2 as _re2  # google-re2

    HAVE_RE2 = True
except ImportError:  # pragma: no cover - exercised only where the wheel is missing
    _re2 = None
    HAVE_RE2 = False

try:
    import hyperscan as _hs  # optional, x86-64 only

    HAVE_HYPERSCAN = True
except Exception:  # pragma: no cover - ImportError, or a broken native library
    _hs = None
    HAVE_HYPERSCAN = False

__all__ = [
    "MIN_LITERAL",
    "PatternError",
    "CompiledPattern",
    "compile_pattern",
    "required_literal",
    "Prefilter",
    "LineScan",
    "LiteralSet",
    "HAVE_RE2",
    "HAVE_HYPERSCAN",
]

MIN_LITERAL = 4


class PatternError(ValueError):
    """A pattern that Denpex refuses, with a one-line reason."""


_LITERAL = _sre_const.LITERAL
_SUBPATTERN = _sre_const.SUBPATTERN
_MAX_REPEAT = _sre_const.MAX_REPEAT
_MIN_REPEAT = _sre_const.MIN_REPEAT
_MAXREPEAT = _sre_const.MAXREPEAT
_REFUSED = {
    getattr(_sre_const, "GROUPREF", None): "backreferences",
    getattr(_sre_const, "GROUPREF_EXISTS", None): "conditional groups",
    getattr(_sre_const, "ASSERT", None): "lookahead/lookbehind",
    getattr(_sre_const, "ASSERT_NOT", None): "negative lookahead/lookbehind",
    getattr(_sre_const, "POSSESSIVE_REPEAT", None): "possessive quantifiers",
    getattr(_sre_const, "ATOMIC_GROUP", None): "atomic groups",
}
_REFUSED.pop(None, None)


def _walk(parsed, depth: int = 0) -> Iterable[tuple]:
    for op, av in parsed:
        yield op, av, depth
        if op is _SUBPATTERN:
            yield from _walk(av[-1], depth)
        elif op in (_MAX_REPEAT, _MIN_REPEAT):
            yield from _walk(av[2], depth + 1)
        elif op is _sre_const.BRANCH:
            for alt in av[1]:
                yield from _walk(alt, depth)


def _check_structure(parsed) -> None:
    for op, av, _depth in _walk(parsed):
        if op in _REFUSED:
            raise PatternError(f"uses {_REFUSED[op]}, which RE2 does not support")


def _check_backtracking(parsed) -> None:
    """Refuse nested unbounded repeats, the classic catastrophic-backtracking shape.

    Only needed when RE2 is absent and patterns run on Python ``re``.
    """
    for op, av, _depth in _walk(parsed):
        if op in (_MAX_REPEAT, _MIN_REPEAT) and av[1] == _MAXREPEAT:
            for op2, av2, _ in _walk(av[2]):
                if op2 in (_MAX_REPEAT, _MIN_REPEAT) and av2[1] in (_MAXREPEAT,) or (
                    op2 in (_MAX_REPEAT, _MIN_REPEAT) and av2[1] > 1
                ):
                    raise PatternError("nests a repeat inside an unbounded repeat (catastrophic backtracking)")


def required_literal(pattern: str) -> tuple[str, bool] | None:
    """The longest literal run that every match of ``pattern`` contains, and whether the
    pattern is case-insensitive. Only top-level sequences count (not branches or repeats)."""
    return _literal_of(_sre_parse.parse(pattern))


def _literal_of(parsed) -> tuple[str, bool] | None:
    ignorecase = bool(parsed.state.flags & re.IGNORECASE)
    best = ""

    def scan(seq) -> None:
        nonlocal best
        run: list[str] = []
        for op, av in seq:
            if op is _LITERAL:
                run.append(chr(av))
                continue
            cand = "".join(run)
            if len(cand) > len(best):
                best = cand
            run = []
            if op is _SUBPATTERN:
                scan(av[-1])
            elif op in (_MAX_REPEAT, _MIN_REPEAT) and av[0] >= 1:
                scan(av[2])
        cand = "".join(run)
        if len(cand) > len(best):
            best = cand

    scan(parsed)
    if not best:
        return None
    return best, ignorecase


@dataclass(frozen=True)
class CompiledPattern:
    source: str
    literal: str
    ignorecase: bool
    search: Callable[[str], object]


def _engine(pattern: str) -> Callable[[str], object]:
    """The pattern's ``search``: RE2 (linear time), else Python ``re``."""
    if HAVE_RE2:
        try:
            opts = _re2.Options()
            opts.max_mem = 8 << 20
            rx = _re2.compile(pattern, options=opts)
        except Exception as exc:  # re2.error
            raise PatternError(f"is not accepted by RE2: {exc}") from None
        return _direct_search(rx) or rx.search
    return re.compile(pattern).search  # pragma: no cover - depends on the platform


class _Found:
    """A match of :func:`_direct_search`: its named groups (``groupdict``) and its text."""

    __slots__ = ("_data", "_spans", "_names")

    def __init__(self, data: bytes, spans: list, names: list) -> None:
        self._data, self._spans, self._names = data, spans, names

    def _text(self, i: int) -> str | None:
        a, b = self._spans[i]
        return None if a < 0 else self._data[a:b].decode("utf-8")

    def group(self, i: int = 0) -> str | None:
        return self._text(i)

    def groupdict(self) -> dict[str, str | None]:
        return {name: self._text(i) for name, i in self._names}


def _re2_core(rx):
    """(the compiled RE2 inside the binding's pattern, its unanchored mode), or None where the
    binding is not the one this was written against. Its ``Match`` is the search without the
    binding's Python layer, a generator that maps every match's byte offsets back to characters:
    4-5 us a search, against 1.5 us."""
    try:
        core = rx._regexp
        anchor = _re2._Anchor.UNANCHORED
        core.Match(anchor, b"", 0, 0)
    except Exception:
        return None
    return core, anchor


class _DirectSearch:
    """RE2's search of a line without the binding's Python layer (:func:`_re2_core`): a third of
    a candidate line's time in the 1 GiB bench. Signatures need a match's groups, never its
    offsets. Pickled as its pattern (a history worker's findings carry their signatures back)."""

    __slots__ = ("pattern", "_core", "_anchor", "_names")

    def __init__(self, pattern: str, core, anchor) -> None:
        self.pattern, self._core, self._anchor = pattern, core, anchor
        self._names = [(n.decode() if isinstance(n, bytes) else n, int(i)) for n, i in core.NamedCapturingGroups()]

    def __call__(self, text: str) -> _Found | None:
        data = text.encode("utf-8")
        spans = self._core.Match(self._anchor, data, 0, len(data))
        return None if spans[0][0] < 0 else _Found(data, spans, self._names)

    def __reduce__(self):
        return _engine, (self.pattern,)


def _direct_search(rx) -> _DirectSearch | None:
    """:class:`_DirectSearch` of a compiled pattern, or None where the binding's layer must be
    used."""
    got = _re2_core(rx)
    return None if got is None else _DirectSearch(rx.pattern, *got)


class _OnFirstUse:
    """A ``search`` compiled when first called: most signatures never see a line that has their
    literal, and compiling the built-in catalog's 230 patterns was a third of its load time.
    Only for patterns known to compile (the built-in ones, which the tests compile)."""

    __slots__ = ("pattern", "_search")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._search: Callable[[str], object] | None = None

    def __call__(self, text: str):
        if self._search is None:
            self._search = _engine(self.pattern)
        return self._search(text)


def checked_pattern(pattern: str, literal: str, ignorecase: bool) -> CompiledPattern:
    """A pattern checked already (the built-in catalog, frozen at release with its literal),
    compiled by the regex engine at its first search."""
    return CompiledPattern(pattern, literal, ignorecase, _OnFirstUse(pattern) if HAVE_RE2 else _engine(pattern))


def compile_pattern(pattern: str, *, require_literal: bool = True, lazy: bool = False) -> CompiledPattern:
    """Validate and compile one signature pattern. Raises :class:`PatternError`. ``lazy``: the
    regex engine compiles it at its first search (a pattern already known to compile)."""
    if not isinstance(pattern, str) or not pattern:
        raise PatternError("must be a non-empty string")
    if len(pattern) > 2000:
        raise PatternError("is longer than 2000 characters")
    try:
        parsed = _sre_parse.parse(pattern)
    except re.error as exc:
        raise PatternError(f"is not a valid regular expression: {exc}") from None
    _check_structure(parsed)
    lit = _literal_of(parsed)
    if require_literal and (lit is None or len(lit[0]) < MIN_LITERAL):
        raise PatternError(
            f"has no literal run of {MIN_LITERAL}+ characters that every match contains "
            "(needed by the prefilter)"
        )
    literal, ignorecase = lit if lit else ("", False)
    if not HAVE_RE2:  # pragma: no cover - depends on the platform
        _check_backtracking(parsed)
    search = _OnFirstUse(pattern) if lazy and HAVE_RE2 else _engine(pattern)
    return CompiledPattern(pattern, literal, ignorecase, search)


# Bytes below which RE2 beats Hyperscan whole: Hyperscan's compile of the catalog's literals is
# about 35 ms of CPU, its scan about 1.2 ms/MB faster than RE2's (2-core x86-64, 16 MB console).
HYPERSCAN_WORTH = 32 << 20


class Prefilter:
    """Multi-literal search over whole chunks of bytes.

    ``line_starts(data)`` returns the sorted, de-duplicated start offsets of the lines in
    ``data`` that contain at least one literal (which literals a line holds: :class:`LiteralSet`).
    """

    def __init__(self, literals: list[tuple[str, bool]], *, small: bool = False, regex: bool = False,
                 groups: dict[str, tuple[tuple[str, ...], bool]] | None = None):
        """``small``: the bytes to scan are few (:data:`HYPERSCAN_WORTH`): Hyperscan's compile
        (about 35 ms of CPU for the catalog) costs more than RE2's slower scan saves, so RE2 is
        used; both find the same lines. ``regex``: the literals are regular expressions (in the
        syntax both engines share, none matching a newline). ``groups``: other searches over the
        same chunks, by name: (patterns, whether they are regular expressions). :meth:`scan` gives
        their lines from the same pass: on Hyperscan they join the one database (a rank log's three
        scans of 0.3, 0.1 and 0.4 ns a byte cost 0.24 together), on RE2 one automaton of their
        union finds the lines any holds (1.6 ns a byte, against 1.5 for each alone)."""
        self.literals = literals
        self.backend = "none"
        self.groups: tuple[str, ...] = ()  # the groups :meth:`scan` serves
        self._bounds: list[int] = []  # the ids where each group starts (literals are 0..)
        self._hs_db = None
        # RE2 (or re): the first match of the literals, of their union with the groups, of each group
        self._first = self._first_any = None
        self._group_first: list = []
        if not literals:
            return
        # DENPEX_PREFILTER=re2 forces the portable backend (benchmarks, tests of the fallback).
        if HAVE_HYPERSCAN and not small and os.environ.get("DENPEX_PREFILTER", "") != "re2":
            try:
                exprs = [(lit if regex else re.escape(lit)).encode("utf-8") for lit, _ in literals]
                flags = [(_hs.HS_FLAG_CASELESS if ci else 0) for _, ci in literals]
                bounds = []
                for pats, rx in (groups or {}).values():
                    bounds.append(len(exprs))
                    exprs += [(p if rx else re.escape(p)).encode("utf-8") for p in pats]
                    flags += [0] * len(pats)
                probe = b"" if regex else literals[0][0].encode("utf-8")
                db = hyperscan_database(_hs, exprs, list(range(len(exprs))), flags, probe)
                self._hs_db = db
                self._scratch = _hs.Scratch(db)
                self.backend = "hyperscan"
                self.groups = tuple(groups or ())
                self._bounds = bounds
                return
            except Exception:  # pragma: no cover - fall back to RE2
                self._hs_db = None
        exprs = [(lit if regex else re.escape(lit)).encode("utf-8") for lit, _ in literals]
        alternation = b"|".join((b"(?i:" + e + b")") if ci else e for e, (_, ci) in zip(exprs, literals))
        if HAVE_RE2:
            opts = _re2.Options()
            opts.max_mem = 64 << 20
            self._first = _first_span(_re2.compile(alternation, options=opts))
            self.backend = "re2"
            if groups:
                # One automaton for the union finds every line any of them holds (RE2 costs
                # about 1.5 ns a byte whatever it looks for: three passes cost three times
                # one); each such line, a few in a thousand, is then asked of each one alone.
                alts = [b"|".join((p if rx else re.escape(p)).encode("utf-8") for p in pats)
                        for pats, rx in groups.values()]
                self._first_any = _first_span(_re2.compile(b"|".join([alternation, *alts]), options=opts))
                self._group_first = [_first_span(_re2.compile(a, options=opts)) for a in alts]
                self.groups = tuple(groups)
        else:  # pragma: no cover
            self._first = _first_span(re.compile(alternation))
            self.backend = "re"

    def line_starts(self, data: bytes) -> list[int]:
        """Start offsets of the lines of ``data`` that hold at least one literal."""
        return self.scan(data)[0]

    def scan(self, data: bytes) -> tuple[list[int], dict[str, list[int]]]:
        """:meth:`line_starts`, and the lines of each group it serves (:attr:`groups`), by name,
        from one pass over ``data``."""
        if not self.literals or not data:
            return [], {g: [] for g in self.groups}
        if self._hs_db is not None:
            ends: list[int] = []
            more: list[tuple[int, int]] = []
            first = len(self.literals)  # the groups' ids follow the literals'

            def on_match(i: int, _from: int, to: int, _flags: int, _ctx) -> None:
                if i < first:
                    ends.append(to)
                else:
                    more.append((i, to))

            self._hs_db.scan(data, match_event_handler=on_match, scratch=self._scratch)
            groups = {g: _starts_of(data, [to for i, to in more if lo <= i < hi])
                      for g, lo, hi in zip(self.groups, self._bounds, self._bounds[1:] + [1 << 62])}
            return _starts_of(data, ends), groups
        if self._first_any is None:
            return _starts_of(data, [to for _, to in _spans(self._first, data)]), {}
        rfind = data.rfind
        starts: list[int] = []
        last_line_end = -1
        found: list[list[int]] = [[] for _ in self._group_first]
        main = self._first
        for pos, _ in _spans(self._first_any, data):
            if pos <= last_line_end:
                continue
            s = rfind(b"\n", 0, pos) + 1
            nl = data.find(b"\n", pos)
            last_line_end = nl if nl >= 0 else len(data)
            line = data[s:last_line_end]
            if main(line, 0, len(line)):
                starts.append(s)
            for first, lst in zip(self._group_first, found):
                if first(line, 0, len(line)):
                    lst.append(s)
        return starts, dict(zip(self.groups, found))


def _first_span(rx) -> Callable[[bytes, int, int], tuple[int, int] | None]:
    """The first match of ``rx`` in ``data[pos:end]`` as (start, end) offsets in ``data``, or
    None: RE2's own search where it can be reached (:func:`_re2_core`), else the pattern's."""
    got = _re2_core(rx) if HAVE_RE2 else None
    if got is not None:
        core, anchor = got

        def first(data: bytes, pos: int, end: int) -> tuple[int, int] | None:
            span = core.Match(anchor, data, pos, end)[0]
            return None if span[0] < 0 else span

        return first

    def first_of(data: bytes, pos: int, end: int) -> tuple[int, int] | None:
        m = rx.search(data, pos, end)
        return None if m is None else m.span()

    return first_of


def _spans(first, data: bytes):
    """The matches of a :func:`_first_span` in ``data``, in order, as ``finditer`` gives them."""
    pos, n = 0, len(data)
    while pos <= n:
        span = first(data, pos, n)
        if span is None:
            return
        yield span
        pos = span[1] if span[1] > span[0] else span[1] + 1


def _starts_of(data: bytes, ends: list[int]) -> list[int]:
    """The sorted starts of the lines that hold the matches ending at ``ends``, each once (a
    match never spans a newline)."""
    if not ends:
        return []
    rfind = data.rfind
    starts: list[int] = []
    last_line_end = -1
    for to in sorted(ends):
        pos = to - 1
        if pos <= last_line_end:
            continue
        starts.append(rfind(b"\n", 0, pos) + 1)
        nl = data.find(b"\n", pos)
        last_line_end = nl if nl >= 0 else len(data)
    return starts


class LiteralSet:
    """Which of many literals one line holds, in one call: an RE2 set (one automaton pass over
    the line) where google-re2 is installed, else one ``in`` test per literal. ``ids(text)``
    gives the indices of the literals found, ascending. Case-insensitive literals are given
    lower-case."""

    def __init__(self, literals: list[tuple[str, bool]]):
        self.literals = literals
        self._set = None
        if HAVE_RE2 and literals:
            opts = _re2.Options()
            opts.max_mem = 64 << 20
            rset = _re2.Set.SearchSet(opts)
            for text, ci in literals:
                rset.Add(("(?i)" if ci else "") + re.escape(text))
            rset.Compile()
            self._set = rset._set  # the compiled set; its wrapper's Match re-encodes each call
            return
        self._cs = [(i, t) for i, (t, ci) in enumerate(literals) if not ci]  # pragma: no cover
        self._ci = [(i, t) for i, (t, ci) in enumerate(literals) if ci]  # pragma: no cover

    def ids(self, text: str) -> list[int]:
        if self._set is not None:
            found = self._set.Match(text.encode("utf-8", "surrogatepass"))
            found.sort()
            return found
        found = [i for i, t in self._cs if t in text]  # pragma: no cover - without google-re2
        if self._ci:  # pragma: no cover
            low = text.lower()
            found += [i for i, t in self._ci if t in low]
            found.sort()
        return found


class LineScan:
    """The lines of a chunk that hold any of a few patterns, asked from any thread: Hyperscan
    for a chunk of :attr:`hs_min` bytes or more, RE2 below (compiling a Hyperscan database costs
    about what it saves on 1 MB, and a small job compiles none). Each thread has its own
    scanners: a Hyperscan scratch serves one scan at a time."""

    hs_min = 1 << 20

    def __init__(self, patterns: Iterable[str], *, regex: bool = False):
        self.patterns = [(p, False) for p in patterns]
        self.regex = regex
        self._local = threading.local()

    def line_starts(self, data: bytes) -> list[int]:
        small = len(data) < self.hs_min
        key = "small" if small else "big"
        pf = getattr(self._local, key, None)
        if pf is None:
            pf = Prefilter(self.patterns, small=small, regex=self.regex)
            setattr(self._local, key, pf)
        return pf.line_starts(data)
