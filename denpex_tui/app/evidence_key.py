"""``E`` in watch: write an evidence bundle of the watched logs and say where.

The same bundle as ``denpex evidence PATH... -o OUT.tar.gz`` (render/bundle.make_bundle), made in
a worker thread (it rescans the logs from disk) into the working directory; the result, or the
reason it could not be written, is a notification.
"""

from __future__ import annotations

import os
import time

__all__ = ["start"]


def start(app) -> None:
    paths = list(app.options.paths)
    if not paths:
        app.notify("no log paths to bundle (watch was started without PATH)", severity="warning")
        return
    out = os.path.abspath(time.strftime("denpex-evidence-%Y%m%d-%H%M%S.tar.gz"))
    app.notify(f"writing an evidence bundle to {out} ...", timeout=4)

    def work() -> None:
        from denpex_tui.render.bundle import BundleError, make_bundle

        try:
            b, _ = make_bundle(paths, out)
            msg, sev = f"evidence bundle written: {b.path} ({len(b.files)} files)", "information"
        except BundleError as exc:
            msg, sev = f"evidence bundle not written: {exc}", "error"
        except Exception as exc:  # a worker error must be visible, never lost
            msg, sev = f"evidence bundle not written: {type(exc).__name__}: {exc}", "error"
        if app.is_running:
            app.call_from_thread(app.notify, msg, severity=sev, timeout=15)

    app.run_worker(work, thread=True, group="evidence", exclusive=True, exit_on_error=False)
