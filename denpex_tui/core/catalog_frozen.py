"""The built-in catalog's TOML files, parsed once at release: ``signatures/_parsed.json``.

Parsing 144 TOML files with ``tomllib`` (pure Python) was a third of the catalog's load, and
the catalog loads at every command's start. The JSON file holds each file's parsed table and
the digest of all their bytes; it is used only while the digest is that of the files on disk
(an edited signature is read from its TOML, as a user pack always is). Regenerate it with
``python -m denpex_tui.core.catalog_frozen``; a test fails while it is out of date.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

__all__ = ["digest", "frozen_tables", "freeze", "LITERALS"]

LITERALS = "_literals"  # in each table: every pattern's prefilter literal, found at release

NAME = "_parsed.json"


def digest(files: list[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for name, raw in files:
        h.update(name.encode() + b"\0" + len(raw).to_bytes(8, "little") + raw)
    return h.hexdigest()


def frozen_tables(directory: Path, files: list[tuple[str, bytes]]) -> dict[str, dict] | None:
    """Each file's parsed table, if the frozen copy is of exactly these files' bytes."""
    try:
        doc = json.loads((directory / NAME).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("digest") != digest(files):
        return None
    tables = doc.get("tables")
    return tables if isinstance(tables, dict) and set(tables) == {n for n, _ in files} else None


def freeze(directory: Path) -> Path:
    import tomllib

    from .patterns import compile_pattern

    files = [(p.name, p.read_bytes()) for p in sorted(directory.glob("*.toml")) if p.is_file()]
    tables = {n: tomllib.loads(raw.decode("utf-8")) for n, raw in files}
    for t in tables.values():  # each pattern checked and its literal found once, here
        pats = [compile_pattern(p) for p in t.get("patterns", [])]
        pats += [compile_pattern(p, require_literal=False) for p in t.get("exclude", [])]
        t[LITERALS] = {c.source: [c.literal, c.ignorecase] for c in pats}
    doc = {"digest": digest(files), "tables": tables}
    out = directory / NAME
    out.write_text(json.dumps(doc, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n")
    return out


if __name__ == "__main__":  # pragma: no cover - a release step
    from .catalog import BUILTIN_DIR

    print(freeze(BUILTIN_DIR))
