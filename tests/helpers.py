"""Shared test helpers (tests/ is on sys.path: pytest's rootdir-relative import mode)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fixtures" / "corpus"
