"""Bad input to a pytest run of the suite: an option or variable the plugin
cannot use is a usage error naming it (pytest's exit status 4), never an
INTERNALERROR, a failure in every example, or silently ignored."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import pytest

from conformance import isolation
from kernels import cache
from properties import watchdog

pytest_plugins = ["pytester"]

CONFTEST = """
def pytest_addhooks(pluginmanager):
    if not pluginmanager.has_plugin("sdpa_conformance"):
        import conformance.plugin
        pluginmanager.register(conformance.plugin, "sdpa_conformance")
"""
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Config:
    """What example_timeout / configure_test_timeout read of a pytest config."""

    def __init__(self, option=None, ini=None, **opts):
        self.option = SimpleNamespace(timeout=None, timeout_method=None, **opts)
        self._ini = ini or {}
        self.pluginmanager = SimpleNamespace(hasplugin=lambda name: True)

    def getoption(self, name, default=None):
        return getattr(self.option, name, default)

    def getini(self, name):
        return self._ini.get(name, "")


@pytest.mark.parametrize("raw", ["inf", "-inf", "nan", "-1", "abc"])
def test_sdpa_timeout_must_be_finite(monkeypatch, raw):
    monkeypatch.setenv(isolation.TIMEOUT_ENV, raw)
    with pytest.raises(pytest.UsageError, match=rf"\$SDPA_TIMEOUT='{raw}': expected a number of seconds, finite"):
        isolation.example_timeout(_Config())


def test_sdpa_timeout_zero_and_numbers_are_read(monkeypatch):
    monkeypatch.delenv(isolation.TIMEOUT_ENV, raising=False)
    assert isolation.example_timeout(_Config(sdpa_timeout=0.0)) == 0 and isolation.example_timeout(_Config(sdpa_timeout=12.5)) == 12.5


@pytest.mark.parametrize("raw", ["abc", "inf", "-3"])
def test_a_bad_pytest_timeout_is_a_usage_error(monkeypatch, raw):
    monkeypatch.setenv("PYTEST_TIMEOUT", raw)
    with pytest.raises(pytest.UsageError, match=rf"\$PYTEST_TIMEOUT='{raw}'"):
        isolation.configure_test_timeout(_Config(), 100)


def test_a_pytest_timeout_of_zero_is_no_bound(monkeypatch):
    monkeypatch.setenv("PYTEST_TIMEOUT", "0")
    assert isolation.configure_test_timeout(_Config(), 100) == "a test: no bound (--timeout 0)"


@pytest.mark.parametrize("seconds", [math.inf, math.nan, 0, -1])
def test_the_watchdog_takes_only_a_finite_bound(seconds):
    with pytest.raises(ValueError, match="expected a finite number of seconds > 0"):
        watchdog.Watchdog(seconds, lambda label, limit: None, backstop=False)
    dog = watchdog.Watchdog(60, lambda label, limit: None, backstop=False)
    try:
        with pytest.raises(ValueError):
            dog.arm("x", seconds)
    finally:
        dog.close()


def test_a_compile_cache_that_cannot_be_made_names_it(tmp_path, monkeypatch):
    monkeypatch.delenv(cache.CACHE_ENV, raising=False)
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(cache.CacheDirError, match="not a directory"):
        cache.use(afile)
    with pytest.raises(cache.CacheDirError, match=r"cannot make the directory \("):
        cache.use(afile / "below")
    assert cache.CACHE_ENV not in os.environ  # nothing pointed at it


def test_an_unknown_reference_plant_raises_a_plain_exception(monkeypatch):
    from reference import planted

    monkeypatch.setenv(planted.ENV, "nope")
    with pytest.raises(ValueError, match="SDPA_PLANT_REFERENCE_BUG='nope': unknown plant") as e:
        planted.check()
    assert isinstance(e.value, planted.UnknownPlant) and not isinstance(e.value, SystemExit)
    monkeypatch.setenv(planted.ENV, "kv-length-plus-one")
    assert planted.check() == "kv-length-plus-one"


# ------------------------------------------------------- end to end (pytest)
@pytest.fixture
def project(pytester, monkeypatch):
    for var in ("SDPA_ADAPTER", "SDPA_SM80_COMPAT", "SDPA_KERNELS_SOURCE", "SDPA_PLANT_MUTANT", "SDPA_TIMEOUT", "PYTEST_TIMEOUT", "PYTEST_ADDOPTS"):
        monkeypatch.delenv(var, raising=False)
    for var in ("SDPA_PLANT_REFERENCE_BUG", "SDPA_COMPILE_CACHE", cache.CACHE_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([ROOT, str(pytester.path)]))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_one="from hypothesis import given, strategies as st\n\n@given(st.integers())\ndef test_x(x):\n    pass\n")
    (pytester.path / "afile").write_text("")
    return pytester


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["--sdpa-timeout=inf"], {}, "--sdpa-timeout=inf: expected a number of seconds, finite"),
        ([], {"PYTEST_TIMEOUT": "abc"}, "$PYTEST_TIMEOUT='abc': expected a number of seconds"),
        (["--compile-cache=afile"], {}, "--compile-cache: compiled cache "),
        (["--compile-cache=/proc/nope"], {}, "--compile-cache: compiled cache /proc/nope: cannot make the directory"),
        (["--report-dir=afile"], {}, "afile: not a directory"),
        (["--report-dir=/proc/nope"], {}, "--report-dir /proc/nope: cannot make"),
        ([], {"SDPA_PLANT_REFERENCE_BUG": "nope"}, "SDPA_PLANT_REFERENCE_BUG='nope': unknown plant (known: "),
        ([], {"SDPA_PLANT_REFERENCE_BUG": "kv-length-plus-one", "CI": "1"}, "refused because $CI is set"),
    ],
    ids=[
        "sdpa-timeout-inf",
        "pytest-timeout-abc",
        "compile-cache-file",
        "compile-cache-unmakeable",
        "report-dir-file",
        "report-dir-unmakeable",
        "plant",
        "plant-in-ci",
    ],
)
def test_bad_run_input_is_a_usage_error(project, monkeypatch, args, env, message):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:benchmark", "-p", "no:randomly", *args, timeout=240)
    err = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:] + err[-2000:]
    assert message in err and "INTERNALERROR" not in err + result.stdout.str() and "Traceback" not in err
