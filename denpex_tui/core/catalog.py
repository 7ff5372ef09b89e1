"""The signature catalog: one TOML file per signature, validated on load.

The format is documented in ``docs/signature-format.md``. Load order: built-in pack <
user config dir pack < ``--signatures DIR`` packs, a later file replacing an id. A bad file is
reported as one line naming the file and the field; the others still load.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .catalog_frozen import LITERALS
from .commands import TemplateError, parse_template
from .patterns import CompiledPattern, PatternError, checked_pattern, compile_pattern
from .text import has_control

__all__ = [
    "PHASES",
    "ROLES",
    "SEVERITIES",
    "BUILTIN_DIR",
    "Signature",
    "Catalog",
    "CatalogProblem",
    "load_catalog",
    "load_pack",
]

BUILTIN_DIR = Path(__file__).resolve().parent.parent / "signatures"
PHASES = (
    "startup",
    "forward-backward",
    "optimizer-step",
    "checkpoint-save",
    "data-loading",
    "restart",
    "shutdown",
    "any",
)
ROLES = ("initiating", "collateral", "context")
SEVERITIES = ("error", "warning", "info")
_ID = re.compile(r"^[a-z0-9]+(?:\.[a-z0-9]+(?:-[a-z0-9]+)*)+$")


@dataclass(frozen=True)
class CheckItem:
    text: str
    condition: str | None = None
    parsed: Any = None  # core.conditions.Condition
    command: str | None = None  # the denpex command that answers it (a command template)


@dataclass(frozen=True)
class VerifyCommand:
    title: str
    command: str


@dataclass(frozen=True)
class Sibling:
    id: str
    evidence: str


@dataclass(frozen=True)
class Example:
    line: str
    match: bool
    source: str


@dataclass(frozen=True)
class Signature:
    id: str
    title: str
    family: str
    phase: str
    role: str
    severity: str
    patterns: tuple[CompiledPattern, ...]
    excludes: tuple[CompiledPattern, ...]
    cause: str
    symptoms: tuple[str, ...]
    fix: tuple[str, ...]
    references: tuple[str, ...]
    exception: bool = False
    evidence_only: bool = False
    refines: tuple[str, ...] = ()
    siblings: tuple[Sibling, ...] = ()
    checklist: tuple[CheckItem, ...] = ()
    verify: tuple[VerifyCommand, ...] = ()
    affects_package: str | None = None
    affects_versions: str | None = None
    examples: tuple[Example, ...] = ()
    pack: str = "built-in"
    builtin: bool = True
    path: str = ""

    def matches(self, text: str) -> bool:
        """Full-pattern test on one (prefix-stripped, safe) line."""
        return self.search(text) is not None

    def search(self, text: str) -> dict[str, Any] | None:
        """The line's fields when it matches (as :meth:`fields` gives them), else None: one
        search of each pattern for both answers."""
        for p in self.patterns:
            m = p.search(text)
            if m:
                for x in self.excludes:
                    if x.search(text):
                        return None
                try:
                    return {k: v for k, v in m.groupdict().items() if v is not None}
                except AttributeError:
                    return {}
        return None

    def fields(self, text: str) -> dict[str, Any]:
        """The named groups of the first pattern that matches (``(?P<path>...)``), as fields."""
        for p in self.patterns:
            m = p.search(text)
            if m:
                try:
                    return {k: v for k, v in m.groupdict().items() if v is not None}
                except AttributeError:
                    return {}
        return {}

    def affected(self, versions: dict[str, str]) -> bool | None:
        """Whether the versions printed in the logs fall in the affected range (None: unknown)."""
        if not self.affects_package or not self.affects_versions:
            return None
        v = versions.get(self.affects_package)
        if not v:
            return None
        from packaging.specifiers import SpecifierSet

        try:
            return SpecifierSet(self.affects_versions).contains(v, prereleases=True)
        except Exception:
            return None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "family": self.family,
            "phase": self.phase,
            "role": self.role,
            "severity": self.severity,
            "patterns": [p.source for p in self.patterns],
            "exclude": [p.source for p in self.excludes],
            "exception": self.exception,
            "evidence_only": self.evidence_only,
            "refines": list(self.refines),
            "cause": self.cause,
            "symptoms": list(self.symptoms),
            "fix": list(self.fix),
            "references": list(self.references),
            "siblings": [{"id": s.id, "evidence": s.evidence} for s in self.siblings],
            "checklist": [{"text": c.text, "condition": c.condition, **({"command": c.command} if c.command else {})}
                          for c in self.checklist],
            "verify": [{"title": v.title, "command": v.command} for v in self.verify],
            "affects": (
                {"package": self.affects_package, "versions": self.affects_versions}
                if self.affects_package
                else None
            ),
            "pack": self.pack,
            "builtin": self.builtin,
        }


@dataclass(frozen=True)
class CatalogProblem:
    path: str
    field: str
    message: str

    def __str__(self) -> str:
        name = os.path.basename(self.path) or self.path
        if self.field:
            return f"{name}: field '{self.field}': {self.message}"
        return f"{name}: {self.message}"


class _Invalid(Exception):
    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name
        self.message = message


def _no_control(key: str, v: str) -> str:
    # Pack text reaches the terminal and the clipboard: a third-party pack is untrusted.
    if has_control(v.replace("\n", " ")):
        raise _Invalid(key, "contains a control character (escape sequences are not allowed)")
    return v


def _str(d: dict, key: str, required: bool = True, default: str = "") -> str:
    if key not in d:
        if required:
            raise _Invalid(key, "is missing")
        return default
    v = d[key]
    if not isinstance(v, str) or (required and not v.strip()):
        raise _Invalid(key, "must be a non-empty string")
    return _no_control(key, v.strip())


def _str_list(d: dict, key: str, required: bool = True, allow_empty: bool = False) -> tuple[str, ...]:
    if key not in d:
        if required:
            raise _Invalid(key, "is missing")
        return ()
    v = d[key]
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise _Invalid(key, "must be an array of strings")
    if required and not v and not allow_empty:
        raise _Invalid(key, "must not be empty")
    return tuple(_no_control(f"{key}[{i}]", x.strip()) for i, x in enumerate(v))


def _bool(d: dict, key: str) -> bool:
    v = d.get(key, False)
    if not isinstance(v, bool):
        raise _Invalid(key, "must be true or false")
    return v


def _tables(d: dict, key: str) -> list[dict]:
    v = d.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise _Invalid(key, "must be an array of tables ([[%s]])" % key)
    return v


_KNOWN = {
    "schema", "id", "title", "family", "phase", "role", "severity", "patterns", "exclude",
    "exception", "refines", "evidence_only", "cause", "symptoms", "fix", "references",
    "siblings", "checklist", "verify", "affects", "examples",
}


def _parse_condition(text: str):
    from denpex_tui.core.conditions import parse_condition

    return parse_condition(text)


def _build(data: dict, path: Path, pack: str, builtin: bool) -> Signature:
    """A signature from one parsed file, every field checked; the first problem raises
    ``_Invalid`` naming the field (``checklist[2].condition``)."""
    known = data.pop(LITERALS, None) if builtin else None  # frozen: checked at release
    unknown = sorted(set(data) - _KNOWN)
    if unknown:
        raise _Invalid(unknown[0], "is not a known field")
    if data.get("schema") != 1:
        raise _Invalid("schema", "must be 1")
    sid, family, phase, role, severity = _identity(data, path)
    evidence_only = _bool(data, "evidence_only")
    patterns, excludes = _patterns(data, evidence_only, lazy=builtin, known=known)
    refines = _str_list(data, "refines", required=False)
    for r in refines:
        if not _ID.match(r):
            raise _Invalid("refines", f"'{r}' is not a signature id")
    siblings = _each(data, "siblings", lambda s: Sibling(_str(s, "id"), _str(s, "evidence")))
    checklist = _each(data, "checklist", _check_item)
    verify = _each(data, "verify", _verify_command)
    pkg, vers = _affects(data, check=known is None)
    examples = _each(data, "examples", _example)
    if builtin and not evidence_only:
        if not any(e.match for e in examples) or not any(not e.match for e in examples):
            raise _Invalid("examples", "needs at least one matching and one non-matching real line")
    return Signature(
        id=sid,
        title=_str(data, "title"),
        family=family,
        phase=phase,
        role=role,
        severity=severity,
        patterns=tuple(patterns),
        excludes=tuple(excludes),
        cause=_str(data, "cause"),
        symptoms=_str_list(data, "symptoms"),
        fix=_str_list(data, "fix"),
        references=_str_list(data, "references", required=builtin),
        exception=_bool(data, "exception"),
        evidence_only=evidence_only,
        refines=refines,
        siblings=tuple(siblings),
        checklist=tuple(checklist),
        verify=tuple(verify),
        affects_package=pkg,
        affects_versions=vers,
        examples=tuple(examples),
        pack=pack,
        builtin=builtin,
        path=str(path),
    )


def _identity(data: dict, path: Path) -> tuple[str, str, str, str, str]:
    """(id, family, phase, role, severity), each checked."""
    sid = _str(data, "id")
    if not _ID.match(sid):
        raise _Invalid("id", "must look like family.kebab-name (lowercase)")
    if path.suffix == ".toml" and path.stem != sid:
        raise _Invalid("id", f"must equal the file name ({path.stem})")
    family = _str(data, "family")
    if sid.split(".", 1)[0] != family:
        raise _Invalid("family", f"must be the first part of the id ({sid.split('.', 1)[0]})")
    phase = _str(data, "phase")
    if phase not in PHASES:
        raise _Invalid("phase", "must be one of " + ", ".join(PHASES))
    role = _str(data, "role")
    if role not in ROLES:
        raise _Invalid("role", "must be one of " + ", ".join(ROLES))
    severity = _str(data, "severity")
    if severity not in SEVERITIES:
        raise _Invalid("severity", "must be one of " + ", ".join(SEVERITIES))
    return sid, family, phase, role, severity


def _patterns(data: dict, evidence_only: bool, *, lazy: bool = False, known: dict | None = None) -> tuple[list, list]:
    """The compiled patterns (required unless evidence_only) and excludes; ``lazy`` (the
    built-in ones, which the tests compile): compiled by the regex engine on first use;
    ``known``: the literals of patterns checked already (the frozen built-in catalog)."""
    if known is not None:
        try:
            return ([checked_pattern(p, *known[p]) for p in data.get("patterns", [])],
                    [checked_pattern(p, *known[p]) for p in data.get("exclude", [])])
        except (KeyError, TypeError):
            pass  # not as frozen: checked here
    raw_patterns = _str_list(data, "patterns", required=True, allow_empty=evidence_only)
    if not raw_patterns and not evidence_only:
        raise _Invalid("patterns", "must not be empty (or set evidence_only = true)")
    patterns = []
    for i, p in enumerate(raw_patterns):
        try:
            patterns.append(compile_pattern(p, lazy=lazy))
        except PatternError as exc:
            raise _Invalid(f"patterns[{i}]", str(exc)) from None
    excludes = []
    for i, p in enumerate(_str_list(data, "exclude", required=False)):
        try:
            excludes.append(compile_pattern(p, require_literal=False, lazy=lazy))
        except PatternError as exc:
            raise _Invalid(f"exclude[{i}]", str(exc)) from None
    return patterns, excludes


def _each(data: dict, key: str, parse) -> list:
    """``parse`` applied to each table of the array ``key``; a problem is named
    ``key[i].field``."""
    out = []
    for i, table in enumerate(_tables(data, key)):
        try:
            out.append(parse(table))
        except _Invalid as exc:
            raise _Invalid(f"{key}[{i}].{exc.field}", exc.message) from None
    return out


def _check_item(c: dict) -> CheckItem:
    text = _str(c, "text")
    cond = c.get("condition")
    parsed = None
    if cond is not None:
        if not isinstance(cond, str):
            raise _Invalid("condition", "must be a string")
        try:
            parsed = _parse_condition(cond)
        except ValueError as exc:
            raise _Invalid("condition", str(exc)) from None
    cmd = c.get("command")
    if cmd is not None:
        if not isinstance(cmd, str):
            raise _Invalid("command", "must be a string")
        try:
            parse_template(cmd)
        except TemplateError as exc:
            raise _Invalid("command", str(exc)) from None
    return CheckItem(text, cond, parsed, cmd)


def _verify_command(v: dict) -> VerifyCommand:
    title = _str(v, "title")
    command = _str(v, "command")
    try:
        parse_template(command)
    except TemplateError as exc:
        raise _Invalid("command", str(exc)) from None
    return VerifyCommand(title, command)


def _affects(data: dict, check: bool = True) -> tuple[str | None, str | None]:
    """(package, PEP 440 versions) of an ``affects`` table, or (None, None); ``check``: the
    versions are parsed (not for the frozen built-in catalog, whose TOML the tests load)."""
    affects = data.get("affects")
    if affects is None:
        return None, None
    if not isinstance(affects, dict):
        raise _Invalid("affects", "must be a table { package, versions }")
    try:
        pkg = _str(affects, "package")
        vers = _str(affects, "versions")
    except _Invalid as exc:
        raise _Invalid(f"affects.{exc.field}", exc.message) from None
    if not check:
        return pkg, vers
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        SpecifierSet(vers)
    except InvalidSpecifier:
        raise _Invalid("affects.versions", "is not a PEP 440 version specifier") from None
    return pkg, vers


def _example(e: dict) -> Example:
    line = e.get("line")
    if not isinstance(line, str) or not line:
        raise _Invalid("line", "must be a non-empty string")
    match = e.get("match")
    if not isinstance(match, bool):
        raise _Invalid("match", "must be true or false")
    return Example(line, match, _str(e, "source"))


def load_file(path: Path, pack: str, builtin: bool, raw: bytes | None = None) -> Signature:
    """Load one signature file (its bytes, if read already); raises :class:`_Invalid`."""
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    from .untrusted import UntrustedError, check_toml, read_capped

    try:
        if raw is None:
            with open(path, "rb") as fh:
                raw = read_capped(fh, 1 << 20, "the file")
        text = raw.decode("utf-8")
        check_toml(text, "the file")  # a pack is untrusted: tomllib recurses on nesting
        data = tomllib.loads(text)
    except UntrustedError as exc:
        raise _Invalid("", str(exc).replace("the file: ", "", 1)) from None
    except UnicodeDecodeError:
        raise _Invalid("", "is not UTF-8 text") from None
    except RecursionError:
        raise _Invalid("", "is nested too deeply to read") from None
    except tomllib.TOMLDecodeError as exc:
        raise _Invalid("", f"is not valid TOML ({exc})") from None
    return _build(data, path, pack, builtin)


def load_pack(directory: Path | str, *, builtin: bool = False) -> tuple[list[Signature], list[CatalogProblem]]:
    directory = Path(directory)
    sigs: list[Signature] = []
    problems: list[CatalogProblem] = []
    pack = "built-in" if builtin else str(directory)
    try:
        entries = sorted(p for p in directory.iterdir() if p.suffix == ".toml" and p.is_file())
    except OSError as exc:
        return [], [CatalogProblem(str(directory), "", f"cannot read the directory ({exc.strerror})")]
    frozen, raws = None, {}
    if builtin:  # parsed at release, while the files are those (catalog_frozen.py)
        from .catalog_frozen import frozen_tables

        try:
            raws = {p: p.read_bytes() for p in entries}
        except OSError:
            raws = {}
        frozen = frozen_tables(directory, [(p.name, r) for p, r in raws.items()]) if raws else None
    for p in entries:
        try:
            if frozen is not None:
                sigs.append(_build(frozen[p.name], p, pack, builtin))
            else:
                sigs.append(load_file(p, pack, builtin, raws.get(p)))  # (read once)
        except _Invalid as exc:
            problems.append(CatalogProblem(str(p), exc.field, exc.message))
        except OSError as exc:
            problems.append(CatalogProblem(str(p), "", f"cannot be read ({exc.strerror})"))
    return sigs, problems


class Catalog:
    """The loaded signatures, by id, in load order."""

    def __init__(self, signatures: list[Signature], problems: list[CatalogProblem] | None = None):
        self.by_id: dict[str, Signature] = {}
        for s in signatures:
            self.by_id[s.id] = s  # later packs override earlier ones
        self.problems = list(problems or [])
        for s in self.by_id.values():
            for r in s.refines:
                if r not in self.by_id:
                    self.problems.append(CatalogProblem(s.path, "refines", f"'{r}' is not a loaded signature"))

    def __len__(self) -> int:
        return len(self.by_id)

    def __iter__(self):
        return iter(self.by_id.values())

    def get(self, sid: str) -> Signature | None:
        return self.by_id.get(sid)


def user_signature_dir() -> Path:
    from .config import config_dir

    return config_dir() / "signatures"


def load_catalog(extra_dirs: list[str] | None = None, *, include_user: bool = True) -> Catalog:
    sigs, problems = load_pack(BUILTIN_DIR, builtin=True)
    if include_user:
        udir = user_signature_dir()
        if udir.is_dir():
            s, p = load_pack(udir)
            sigs += s
            problems += p
    for d in extra_dirs or []:
        if not Path(d).is_dir():
            problems.append(CatalogProblem(d, "", "is not a directory"))
            continue
        s, p = load_pack(d)
        sigs += s
        problems += p
    return Catalog(sigs, problems)
