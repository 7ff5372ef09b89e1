"""The fix panel's checklist items link to the denpex command that answers them."""

import shlex
import shutil

from helpers import CORPUS

from denpex_tui.commands.checklist import add_parsers
from denpex_tui.commands.cli import build_parser
from denpex_tui.core.fixes import fix_panel
from denpex_tui.core.scan import scan_paths


def test_every_checklist_command_names_a_real_denpex_command(catalog):
    parser = build_parser()
    n = 0
    for sig in catalog:
        for item in sig.checklist:
            if not item.command:
                continue
            n += 1
            filled = item.command.replace("{world_size}", "8").replace("{params}", "7e9")
            words = shlex.split(filled.replace("{", "X").replace("}", ""))
            assert words[0] == "denpex" and words[1] in {"scan", "evidence", "verify", "checkpoints", "footprint"}
            parser.parse_args(words[1:])  # parses: the options exist
    assert n >= 40
    assert callable(add_parsers)


def test_panel_rows_carry_filled_commands(catalog, tmp_path):
    job = tmp_path / "run 03; rm -rf ~"  # a hostile folder name stays one shell word
    shutil.copytree(CORPUS / "fd_leak_emfile", job)
    res = scan_paths([str(job)], catalog=catalog, jobs=1)
    ini = res.incidents[0].initiating
    panel = fix_panel(ini, catalog, res.job)
    rows = {r.text: r for r in panel.checklist if r.command}
    ev = next(r for t, r in rows.items() if t.startswith("Preserve at least 100 lines"))
    words = shlex.split(ev.command.text)
    assert words[:2] == ["denpex", "evidence"] and words[2] == str(job) and ev.command.complete
    ver = next(r for t, r in rows.items() if t.startswith("Repeat the same input"))
    assert shlex.split(ver.command.text)[2] == "os.emfile" and ver.command.missing == ("rerun",)
    j = panel.to_json()
    assert any(c.get("command", {}).get("command", "").startswith("denpex evidence") for c in j["checklist"])


def test_an_internal_error_is_one_line_without_debug():
    import subprocess
    import sys

    code = ("import sys; from denpex_tui.commands import cli\n"
            "try:\n    raise RuntimeError('boom')\nexcept RuntimeError:\n    cli.log.exception('unexpected error')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stderr == ""  # logging's last-resort handler would print the traceback here
