"""A toy project that runs under the suite's plugin (pytester), for tests of
the plugin's selection options: test files of a few lines, none of the
suite's modules, and the run's environment cleared of the suite's variables."""

from __future__ import annotations

from hypothesis import settings

from conformance import family_select

# Registers the plugin in the toy run (the toy project has no pyproject entry point).
CONFTEST = """
def pytest_addhooks(pluginmanager):
    if not pluginmanager.has_plugin("sdpa_conformance"):
        import conformance.plugin
        pluginmanager.register(conformance.plugin, "sdpa_conformance")
"""


def toy_project(pytester, monkeypatch, **files):
    """Yield ``pytester`` set up with the plugin and ``files`` (module name -> source; names no module of
    the suite has: one import namespace); the Hypothesis profile is restored after."""
    for var in ("SDPA_ADAPTER", "SDPA_SM80_COMPAT", "SDPA_KERNELS_SOURCE", family_select.FAMILY_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(pytester.path.parent))
    profile = settings.get_current_profile_name()
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(**files)
    yield pytester
    settings.load_profile(profile)
