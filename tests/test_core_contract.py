"""Import contract: the domain core never imports Textual (or Rich), so scan, follow and the
tests share it without a UI. Checked in a fresh interpreter."""

import subprocess
import sys

CORE = [
    "denpex_tui.core.scan",
    "denpex_tui.core.explain",
    "denpex_tui.core.triage",
    "denpex_tui.core.fixes",
    "denpex_tui.probes.sampler",
    "denpex_tui.probes.differential",
    "denpex_tui.live",
]


def test_core_never_imports_textual_or_rich():
    code = (
        "import importlib, sys, pkgutil\n"
        f"mods = {CORE!r}\n"
        "import denpex_tui.live as live\n"
        "mods += [m.name for m in pkgutil.iter_modules(live.__path__, 'denpex_tui.live.')]\n"
        "import denpex_tui.core as core\n"
        "mods += [m.name for m in pkgutil.iter_modules(core.__path__, 'denpex_tui.core.')]\n"
        "import denpex_tui.probes as probes\n"
        "mods += [m.name for m in pkgutil.iter_modules(probes.__path__, 'denpex_tui.probes.')\n"
        "         if not m.name.endswith('.cli')]\n"
        "for m in mods: importlib.import_module(m)\n"
        "bad = sorted(k for k in sys.modules if k.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"UI modules imported by the core: {out.stdout}"
