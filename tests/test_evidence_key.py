"""`E` in watch writes an evidence bundle of the watched logs and says where."""

import asyncio
import shutil

from helpers import CORPUS
from test_app_support import make_app, settle

from denpex_tui.core.bundle_read import is_bundle


def test_E_writes_a_bundle_and_says_where(tmp_path, monkeypatch):
    root = tmp_path / "run"
    shutil.copytree(CORPUS / "fd_leak_emfile", root)
    monkeypatch.chdir(tmp_path)

    async def main():
        app = make_app(str(root))
        async with app.run_test(size=(160, 45)) as pilot:
            await settle(app, pilot)
            await pilot.press("E")
            loop = asyncio.get_running_loop()
            end = loop.time() + 60
            said = []
            while loop.time() < end:
                await pilot.pause(0.1)
                said = [n.message for n in app._notifications if "evidence bundle written" in n.message]
                if said:
                    break
            return said

    said = asyncio.run(main())
    bundles = list(tmp_path.glob("denpex-evidence-*.tar.gz"))
    assert len(bundles) == 1 and is_bundle(str(bundles[0]))
    assert said and str(bundles[0]) in said[0]
