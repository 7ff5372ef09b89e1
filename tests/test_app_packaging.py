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
def test_every_install_line_of_the_readme_installs_this_distribution():
    """'pipx install denpex' installed PyPI's unrelated 'denpex': every install line names a
    checkout or a wheel of denpex-tui, never the bare name."""
    import re

    readme = (ROOT / "README.md").read_text()
    lines = [ln for ln in readme.splitlines() if re.search(r"\b(?:pipx|pip|uv tool) install\b", ln)]
    assert lines
    for ln in lines:
        for m in re.finditer(r"\b(?:pipx|pip|uv tool) install(?: -[-\w]+)* ('?[^\s']+'?)", ln):
            spec = m.group(1).strip("'`")
            assert spec.startswith((".", "dist/")) or (spec == "denpex" and "unrelated program" in ln), ln


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
    # the distribution's own name: PyPI's 'denpex' is another program (issue 20)
    [whl] = out.glob("denpex_tui-*.whl")
    zf = zipfile.ZipFile(whl)
    names = set(zf.namelist())
    meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "\nName: denpex-tui\n" in meta
    eps = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "denpex = denpex_tui.commands:entry" in eps and "denpex-tui = denpex_tui.commands:entry" in eps
    themes = {p.name for p in (ROOT / "themes").glob("*.toml")}
    assert len(themes) >= 3
    for t in themes:
        assert f"denpex_tui/app/themes/{t}" in names
    assert "denpex_tui/app/app.tcss" in names
    assert "denpex_tui/signatures/_parsed.json" in names  # the frozen catalog a start loads from
    assert "denpex_tui/commands/watch.py" in names
