"""``watch --demo``: the demo's checkpoint disk, read from the quota the demo keeps itself.

The demo job writes ``.denpex-demo-disk.json`` (capacity, bytes used) as its ranks save; rank 5
runs out of that space. :class:`DemoProber` reports it for the demo's checkpoint folder and the
folders under it, labelled as the demo's simulated disk (mount, filesystem type and source say
so), instead of the real filesystem the temporary folder happens to be on. Every other reading
(/dev/shm, processes) is this machine's own.
"""

from __future__ import annotations

import json
import os

from denpex_tui.core.demo import DEMO_DISK_FILE
from denpex_tui.probes.readings import PathReading, Snapshot
from denpex_tui.probes.sampler import Prober

__all__ = ["DemoProber", "DEMO_MOUNT"]

DEMO_MOUNT = "demo disk (simulated by --demo)"


class DemoProber(Prober):
    def __init__(self, root: str, **kw) -> None:
        super().__init__(**kw)
        self.root = root

    def snapshot(self) -> Snapshot:
        snap = super().snapshot()
        try:
            with open(os.path.join(self.root, DEMO_DISK_FILE), encoding="utf-8") as fh:
                disk = json.load(fh)
        except (OSError, ValueError):
            return snap
        cap, used, top = int(disk["capacity"]), int(disk["used"]), disk["path"]
        dirs = [top] + sorted(os.path.join(top, d) for d in (os.listdir(top) if os.path.isdir(top) else ())
                              if os.path.isdir(os.path.join(top, d)))
        snap.paths = [p for p in snap.paths if not p.path.startswith(self.root)]
        for i, d in enumerate(dirs):
            snap.paths.insert(i, PathReading(
                path=d, why=["demo checkpoint disk"], exists=True, measured_path=d, mount=DEMO_MOUNT,
                mount_root="/", fstype="demo", source="denpex --demo", fs_class="local", network_fs=False,
                bytes_total=cap, bytes_free=max(0, cap - used), bytes_reserved=0, bytes_used=min(cap, used),
                inodes_total=100_000, inodes_free=100_000 - 64 - len(dirs)))
        return snap
