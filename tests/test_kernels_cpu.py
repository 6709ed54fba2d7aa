"""kernels/: environment, versions, kernels source, rewrites, counters and the
adapter registry, on CPU and without compiling."""

import sys

import pytest
import torch

import kernels
from ground.outcome import Unsupported
from kernels import environment, source
from kernels.arch import compile_arch, set_gpu_arch
from kernels.source import KernelSourceError, Rewrite, StaleMutant

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")


# ------------------------------------------------------------ environment
@no_gpu
def test_environment_without_gpu_is_compile_only():
    env = environment.detect()
    assert env.gpu is None and env.capability is None and env.driver == "none"
    assert env.mode == "compile-only (no GPU)"
    assert "mode: compile-only (no GPU)" in environment.header("prepared", env)


def test_run_modes():
    assert environment.run_mode(None) == "compile-only (no GPU)"
    assert environment.run_mode((8, 0)) == "native sm80"
    assert environment.run_mode((9, 0)) == "sm80 code on sm_90"
    assert environment.run_mode((8, 6)) == "sm80 code on sm_86"


def test_header_names_everything():
    env = environment.Environment("NVIDIA H200", (9, 0), "13.0", environment.installed_versions(), environment.run_mode((9, 0)))
    line = environment.header("wrapper", env)
    for part in (
        "NVIDIA H200 (sm_90, driver 13.0)",
        "torch ",
        "cudnn-frontend ",
        "cutlass-dsl ",
        "hypothesis 6.",
        "mode: sm80 code on sm_90",
        "adapter: wrapper",
        "kernels: ",
    ):
        assert part in line
    assert "\n" not in line


def test_bytecode_says_whether_a_worker_compiles_its_imports(tmp_path, monkeypatch):
    """The report's bytecode row tells the three states apart: bytecode
    written; not written but already cached; neither (each worker compiles
    its imports at start)."""
    import py_compile

    pkg = tmp_path / "probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert environment.bytecode("probe_pkg").startswith("written")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert "compiles its imports at start" in environment.bytecode("probe_pkg")
    py_compile.compile(str(pkg / "__init__.py"))
    assert "holds bytecode, imports load it" in environment.bytecode("probe_pkg")
    assert "not found as source" in environment.bytecode("no_such_package_here")


def test_versions_pass_on_the_pins(monkeypatch):
    monkeypatch.delenv(environment.ALLOW_MISMATCH_ENV, raising=False)
    pinned = dict(environment.PINNED, torch="2.13.0")
    assert environment.check_versions(pinned) == []


def test_versions_fail_clearly_on_a_mismatch(monkeypatch):
    monkeypatch.delenv(environment.ALLOW_MISMATCH_ENV, raising=False)
    fake = {"torch": "2.13.0", "nvidia-cudnn-frontend": "1.31.0", "nvidia-cutlass-dsl": "4.8.1"}
    with pytest.raises(environment.VersionMismatch) as err:
        environment.check_versions(fake)
    msg = str(err.value)
    assert "nvidia-cudnn-frontend: installed 1.31.0, pinned 1.32.0" in msg
    assert "nvidia-cutlass-dsl:" not in msg  # only the mismatching package is listed
    assert environment.ALLOW_MISMATCH_ENV in msg
    monkeypatch.setenv(environment.ALLOW_MISMATCH_ENV, "1")
    assert environment.check_versions(fake) == ["nvidia-cudnn-frontend: installed 1.31.0, pinned 1.32.0"]


# ------------------------------------------------------------ kernels source
def test_source_rejects_a_tree_without_templates(tmp_path):
    (tmp_path / "cudnn").mkdir()
    with pytest.raises(KernelSourceError) as err:
        source.use_kernels_source(tmp_path)
    assert str(tmp_path) in str(err.value) and "prefill_f16.py" in str(err.value)


def test_source_accepts_the_tree_cudnn_came_from(monkeypatch):
    import cudnn  # noqa: F401  (the check compares against the imported package)

    monkeypatch.setattr(source, "_override", None)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv(source.SOURCE_ENV, "")  # restored (or removed) after the test
    root = source.package_root().parent
    assert source.use_kernels_source(root) == root
    assert source.describe() == f"checkout {root / 'cudnn'}"


def test_source_refuses_to_switch_after_import(tmp_path, monkeypatch):
    import cudnn  # noqa: F401

    for rel in source.REQUIRED:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(KernelSourceError, match="already imported"):
        source.use_kernels_source(tmp_path)


# ------------------------------------------------------------------ rewrites
def test_rewrite_applies_exactly_once():
    assert source.rewrite_text("a = 1\nb = 2\n", [Rewrite("f16", "b = 2", "b = 3")], "x") == "a = 1\nb = 3\n"
    assert source.rewrite_text("a = 1\n", [Rewrite("f16", r"a = (\d)", r"a = -\1", regex=True)], "x") == "a = -1\n"
    with pytest.raises(StaleMutant, match="matched 0 times"):
        source.rewrite_text("a = 1\n", [Rewrite("f16", "c = 1", "c = 2")], "x")
    with pytest.raises(StaleMutant, match="matched 2 times"):
        source.rewrite_text("a = 1\na = 1\n", [Rewrite("f16", "a = 1", "a = 2")], "x")


def test_stale_mutant_is_refused_against_the_real_file():
    with pytest.raises(StaleMutant):
        source.check_rewrites([Rewrite("host", "this text is not in prepared_host", "")])
    with pytest.raises(ValueError, match="not one of"):
        source.check_rewrites([Rewrite("nope", "x", "y")])
    with pytest.raises(StaleMutant):
        kernels.get_adapter("prepared", rewrites=[Rewrite("f16", "def ", "def ")])  # many matches


def _params():
    from ground.case import Case
    from kernels.specialize import specialize

    return specialize(Case(d_qk=64, d_v=64, s_q=64, s_kv=64))


# A rewrite with no effect on the code: the module must still be distinct.
_COMMENT = Rewrite("f16", "# Host wrapper.", "# Host wrapper (rewritten).")


def test_template_module_identity_and_rewritten_modules_are_distinct():
    spec = _params()
    pristine = source.template_module(spec.flavor, spec.params)
    assert source.template_module(spec.flavor, spec.params) is pristine
    again = source.template_module(spec.flavor, type(spec.params)(**vars(spec.params)))  # equal params
    assert again is pristine
    mutant = source.template_module(spec.flavor, spec.params, [_COMMENT])
    assert mutant is not pristine
    assert mutant.FROST_SOURCE_DIGEST != pristine.FROST_SOURCE_DIGEST  # distinct compile keys
    assert mutant.__file__ != pristine.__file__
    assert source.template_module(spec.flavor, spec.params, [_COMMENT]) is mutant
    # A rewrite of the other template file leaves this one pristine.
    other = Rewrite("d256", "# Host wrapper.", "# Host wrapper (rewritten).")
    assert source.template_module(spec.flavor, spec.params, [other]) is pristine


def test_rewritten_host_is_a_distinct_module_with_salted_keys():
    from cudnn.sdpa.fwd.kernels.sm80 import prepared_host

    rw = Rewrite("host", '"""Pointer-only dense', '"""(rewritten) Pointer-only dense')
    host = source.host_module([rw])
    assert host is not prepared_host and source.host_module([rw]) is host
    assert host.compile_thd_host is not prepared_host.compile_thd_host  # its own lru
    assert host in source.rewritten_hosts()
    spec = _params()
    mod = source.template_module(spec.flavor, spec.params)
    plain = prepared_host.template_key(vars(mod), {"x": 1}, "prepared_dense")
    salted = host.template_key(vars(mod), {"x": 1}, "prepared_dense")
    assert salted.startswith(plain) and salted != plain
    assert source.host_module() is prepared_host


# ------------------------------------------------------------------ counters
def test_counters_count_new_template_modules():
    from kernels.counters import measure

    spec = _params()
    with measure() as box:
        pass
    assert box.delta.misses == 0 and box.delta.modules == 0
    params = type(spec.params)(**{**vars(spec.params), "sched_l2_mib": 17})  # never used elsewhere
    with measure() as box:
        source.template_module(spec.flavor, params)
    assert box.delta.modules == 1 and box.delta.misses == 0
    with measure() as box:
        source.template_module(spec.flavor, params)
    assert box.delta.modules == 0


# ------------------------------------------------------------ arch rewrite
def test_set_gpu_arch():
    assert set_gpu_arch("--enable-tvm-ffi --gpu-arch=sm_80", "sm_90") == "--enable-tvm-ffi --gpu-arch=sm_90"
    assert set_gpu_arch("--enable-tvm-ffi --gpu-arch sm_80", "sm_90") == "--enable-tvm-ffi --gpu-arch=sm_90"
    assert set_gpu_arch("--enable-tvm-ffi", "sm_90") == "--enable-tvm-ffi"
    assert set_gpu_arch("--enable-tvm-ffi", "sm_80", add=True) == "--enable-tvm-ffi --gpu-arch=sm_80"


def test_compile_arch_patches_only_for_the_block():
    import types

    seen = []
    host = types.SimpleNamespace(compile_cached=lambda *a, **kw: seen.append(kw["options"]))
    real = host.compile_cached
    with compile_arch(host, "sm_90"):
        host.compile_cached(options="--enable-tvm-ffi --gpu-arch=sm_80")
        host.compile_cached(options="--enable-tvm-ffi")
    assert host.compile_cached is real
    with compile_arch(host, None):
        assert host.compile_cached is real
    assert seen == ["--enable-tvm-ffi --gpu-arch=sm_90", "--enable-tvm-ffi"]


# ------------------------------------------------------------------ adapters
def test_registry(monkeypatch):
    monkeypatch.delenv(kernels.ADAPTER_ENV, raising=False)
    assert kernels.get_adapter().name == "prepared"
    monkeypatch.setenv(kernels.ADAPTER_ENV, "wrapper")
    assert kernels.get_adapter().name == "wrapper"
    assert kernels.get_adapter("prepared").name == "prepared"
    with pytest.raises(ValueError, match="unknown adapter 'nope'"):
        kernels.get_adapter("nope")


def test_wrapper_modes(monkeypatch):
    from kernels.wrapper import COMPAT_ENV, WrapperAdapter

    monkeypatch.delenv(COMPAT_ENV, raising=False)
    assert WrapperAdapter().sm80_compat is False
    monkeypatch.setenv(COMPAT_ENV, "1")
    assert WrapperAdapter().sm80_compat is True
    assert WrapperAdapter(sm80_compat=False).sm80_compat is False
    with pytest.raises(Unsupported, match="no 'compile-only'.*prepared adapter") as refused:
        WrapperAdapter().compile_only(None)
    assert refused.value.scope == "adapter" and refused.value.capability == "compile-only"


@no_gpu
def test_adapters_refuse_to_launch_without_gpu():
    from ground.case import Case
    from ground.data import make_inputs

    case = Case()
    for name, said in (("wrapper", "compiles and launches in one call"), ("prepared", "compile_only")):
        with pytest.raises(Unsupported, match=f"no CUDA GPU.*{said}") as refused:
            kernels.get_adapter(name).run(case, make_inputs(case))
        assert (refused.value.scope, refused.value.adapter) == ("machine", name)


def test_sm80_capability_is_faked_for_api_dsl_only():
    from kernels.wrapper import _sm80_capability_for_api_dsl

    real = torch.cuda.get_device_capability
    with _sm80_capability_for_api_dsl():
        scope = {"__name__": "cudnn.sdpa.fwd.api_dsl", "torch": torch}
        exec("cc = torch.cuda.get_device_capability(None)", scope)
        assert scope["cc"] == (8, 0)
        assert torch.cuda.get_device_capability is not real
    assert torch.cuda.get_device_capability is real
