"""Every benchmark still runs against today's code: each bench module imports, and every name a
bench imports from the package (also inside its functions) exists."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
MODULES = sorted(BENCH.glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_every_name_a_bench_takes_from_the_package_exists(path):
    tree = ast.parse(path.read_text())
    missing = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("denpex_tui"):
            mod = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(mod, alias.name):
                    try:
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        missing.append(f"{node.module}.{alias.name} (line {node.lineno})")
    assert not missing, missing


@pytest.mark.parametrize("path", [p for p in MODULES if p.stem != "fuzz"], ids=lambda p: p.stem)
def test_every_bench_module_imports(path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert hasattr(mod, "main"), f"{path.name} has no main()"
    sys.modules.pop(f"bench_{path.stem}", None)
