
import pytest





@pytest.fixture(scope="session")
def _session_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture(autouse=True)
def _isolated_config(tmp_path_factory, monkeypatch, _session_cache):
    """Never read the developer's own ~/.config/denpex during tests, nor use or fill their
    ~/.cache/denpex (compiled databases: one cache for the session)."""
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(_session_cache))


@pytest.fixture(autouse=True)
def _signals_as_python_sets_them():
    """A test that runs ``cli.main`` in this process leaves SIGPIPE at SIG_DFL (the CLI wants
    ``denpex scan | head`` to end quietly). Left so, a later test's write into a pipe whose
    reader went away (a history pool torn down with the app under test) killed pytest itself,
    rc 141 and no report, in place of a BrokenPipeError. Each test starts with Python's own."""
    import signal

    yield
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)


@pytest.fixture(scope="session")
def catalog():
    from denpex_tui.core.catalog import load_catalog

    return load_catalog(include_user=False)


@pytest.fixture(scope="session")
def matcher(catalog):
    from denpex_tui.core.matcher import Matcher

    return Matcher(catalog)
