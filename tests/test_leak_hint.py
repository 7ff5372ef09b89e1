"""The second founding entry with logs alone (issue 21, mechanism 9): an ENOSPC in a checkpoint
save cannot be told from deleted checkpoints still held open (the FastFileWriter fd leak) by the
logs; the incident says which measurement decides and gives the commands, built by
core/commands.py (values quoted, a missing one left as <name>). With readings, the probes name it
(tests/test_probes_fs.py::test_fd_leak_of_deleted_checkpoints_is_named_from_the_readings)."""

import os
import re
from pathlib import Path

from denpex_tui.core.leakhint import LEAK_ID, leak_question
from denpex_tui.core.scan import scan_paths

RUNS = Path(__file__).parent / "fixtures" / "runs"


def _root(d: Path):
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(d) for f in fs if f != "truth.json")
    return next(i for i in scan_paths(files, include_user=False).incidents if i.initiating is not None)


def test_an_enospc_in_a_save_says_which_measurement_decides():
    inc = _root(RUNS / "restart_enospc")  # rank 2's tmpfs checkpoint dir full (torch.save)
    [ev] = [e for e in inc.evidence if "logs alone" in e]
    assert "ls -l /proc/<pid>/fd | grep -c '(deleted)'" in ev  # the pid is not in the logs: a placeholder
    assert re.search(r"lsof -nP \+L1 2>/dev/null \| grep -F -- \S*checkpoints/rank2 ", ev)
    assert re.search(r"df -h -- (\S*checkpoints/rank2) && du -sh -- \1 ", ev)
    assert any(h["signature"] == LEAK_ID and "not decidable from logs" in h["rule"] for h in inc.hypotheses)


def test_the_commands_quote_what_the_log_gave():
    inc = _root(RUNS / "restart_enospc")
    f = inc.initiating
    f.fields = {**f.fields, "path": "/ckpt dir/$(reboot)/x.pt", "errname": "ENOSPC"}
    ev, _ = leak_question(f, {})
    assert "'/ckpt dir/$(reboot)'" in ev and "$(reboot)/" not in ev.replace("'/ckpt dir/$(reboot)'", "")


def test_the_deepspeed_version_says_whether_it_can_be_this_leak():
    inc = _root(RUNS / "restart_enospc")
    ev, _ = leak_question(inc.initiating, {"deepspeed": "0.18.2"})
    assert "in the range whose FastFileWriter leaks" in ev
    ev, _ = leak_question(inc.initiating, {"deepspeed": "0.19.8"})
    assert "outside the FastFileWriter leak's range" in ev


def test_no_question_for_errors_that_are_not_about_space():
    inc = _root(RUNS / "bad_label")
    assert not any("logs alone" in e for e in inc.evidence)
