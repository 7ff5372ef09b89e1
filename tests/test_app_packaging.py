"""The wheel ships the themes and the app's stylesheet (setuptools ignores missing package
data silently, so build one and look). About 3 s: the sources are copied to a temporary
folder, so the checkout gets no build/ directory."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(240)
def test_built_wheel_contains_the_themes_and_the_stylesheet(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "themes", src / "themes")
    shutil.copytree(ROOT / "denpex_tui", src / "denpex_tui", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert (src / "denpex_tui" / "app" / "themes").is_symlink()
    out = tmp_path / "wheel"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "-w", str(out), "--no-deps", "-q"],
                       capture_output=True, text=True, timeout=220)
    assert r.returncode == 0, r.stderr[-2000:]
    [whl] = out.glob("denpex-*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    themes = {p.name for p in (ROOT / "themes").glob("*.toml")}
    assert len(themes) >= 3
    for t in themes:
        assert f"denpex_tui/app/themes/{t}" in names
    assert "denpex_tui/app/app.tcss" in names
    assert "denpex_tui/app/cli.py" in names
