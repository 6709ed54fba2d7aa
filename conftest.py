"""Loads the suite's pytest plugin in a checkout that is not pip-installed.

Installed, the plugin arrives through its pytest11 entry point
(``sdpa_conformance``) before this file is read; registering the module a
second time would be an error, hence the check.
"""


def pytest_addhooks(pluginmanager):
    if not pluginmanager.has_plugin("sdpa_conformance"):
        import conformance.plugin

        pluginmanager.register(conformance.plugin, "sdpa_conformance")
