"""watch while it tears down: timers, signals and keys that fire after the widgets are gone.

The intermittent ``NoMatches: StatusBar`` of the pilot tests at teardown was the 1 s tick
(or the theme signal) refreshing after the screen's widgets had been removed; these tests
put the app in that state on purpose instead of waiting for the race."""

from __future__ import annotations

import asyncio

import pytest
from test_app_support import make_app, settle, write_failed_job

from denpex_tui.app.widgets.status import StatusBar


@pytest.fixture(scope="module")
def failed_root(tmp_path_factory):
    return write_failed_job(tmp_path_factory.mktemp("failed") / "run01")


def test_the_tick_after_the_widgets_are_gone_does_nothing(failed_root):
    async def main():
        app = make_app(failed_root)
        async with app.run_test(size=(160, 45)) as pilot:
            await settle(app, pilot)
            await app.query_one(StatusBar).remove()  # as the screen's teardown does
            app._tick()  # the interval timer firing at that moment
            app.theme = "denpex-light"  # the theme signal's refresh too
            await pilot.pause(0.05)

    asyncio.run(main())


def test_keys_after_exit_reach_no_action(failed_root):
    async def main():
        app = make_app(failed_root)
        async with app.run_test(size=(160, 45)) as pilot:
            await settle(app, pilot)
            app.exit()
            await app.query_one("#search").remove()
            # ESC (a terminal's reply parsed as a key once the app exits on a signal)
            assert await app.run_action("escape") is False

    asyncio.run(main())
