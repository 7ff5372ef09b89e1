"""The one way the watch app is built: by ``denpex watch``, by the tests and by the screenshot
script, so all three run the same app (its engine, its probes, its themes)."""

from __future__ import annotations

from denpex_tui.core.catalog import Catalog, load_catalog

from .app import DenpexApp, WatchOptions

__all__ = ["make_app", "WatchOptions"]


def make_app(options: WatchOptions, catalog: Catalog | None = None, *, engine=None,
             signature_dirs: list[str] | None = None, include_user: bool = True) -> DenpexApp:
    """The app over ``options``; ``engine``: a ready engine (a replay) instead of a live one."""
    if catalog is None:
        catalog = load_catalog(signature_dirs, include_user=include_user)
    return DenpexApp(options, catalog, engine=engine)
