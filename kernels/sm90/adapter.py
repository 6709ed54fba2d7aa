"""Sm90Adapter: the sm90 family through its compile entry point.

``compile_only(case)`` plans the Case with the kernels' own planner
(``kernels.sm90.specialize``), loads the template for its TemplateParams the
way ``SdpaFwdDslSm90.compile`` does (``api_dsl._load_kernel_template``) and
calls the template's ``compile()`` (prefill_d512_f16.py:1490, which reaches
``prepared_host.compile_host``) for sm_90a: on any machine, no CUDA call. The
host names ``--gpu-arch=sm_90a`` itself (prepared_host.py:116), so nothing is
retargeted; only sm_90a compiles (sm_90 and sm_100a fail in libNVVM). On a
machine without a Hopper device the artifact has no positional entry (as for
the SM80 compile-only tier) and the persistent cache stores nothing.

``run(case, inputs, outputs)`` launches a Case through the planner's own
``compile()`` and ``execute()`` (its native binder) on the caller's guarded
buffers: dense as the Case lays them out; THD with the packed buffers, the
cumulative prefixes and a workspace the adapter allocates
(``kernels.sm90.thd``: the arguments, checked against the plan on the CPU).
It needs a Hopper GPU (run on an H200: docs/sm90.md). ``run`` is
``prepare(case, inputs, outputs)`` (plan, compile, bind the arguments, the THD
workspace) then its ``launch()`` (``execute()`` alone) and ``result()``: the
launch properties (properties/launch.py) drive the same ``prepare``.

The adapter is not one of ``kernels.ADAPTERS`` (the ``--adapter`` choices of
the SM80 properties): it serves Cases of the sm90 family only
(``case.family``), which the SM80 adapters refuse (``Fact.adapters``).
"""

from __future__ import annotations

from typing import Optional

from ground.case import Case
from ground.data import guard_bands
from ground.outcome import Unsupported
from ground.phases import timed
from ground.tables import NO_GPU
from kernels.base import CompileDelta, KernelResult, key_digest
from kernels.counters import measure
from kernels.prepared import Prepared
from kernels.sm90 import thd
from kernels.sm90.specialize import FAMILY, TAG, TEMPLATE, Sm90Specialization, plan, specialization, specialize
from kernels.source import sm90_sources


def template_module(params):
    """The template module specialized by ``params`` (config_sm90.TemplateParams),
    loaded as SdpaFwdDslSm90.compile loads it (api_dsl.py:5342): one module per params."""
    from cudnn.sdpa.fwd.api_dsl import _load_kernel_template

    return _load_kernel_template(TEMPLATE, params, tag=TAG)


def compile_spec(spec: Sm90Specialization):
    """Compile ``spec`` for sm_90a through the template's ``compile()``: the
    artifact (entry-less without a Hopper device). The template's own lru in
    front of the compiled cache is forgotten first, so every call asks the
    compiled cache (a repeat is a memo hit: the same cache key)."""
    mod = template_module(spec.params)
    mod._compile.cache_clear()
    args, kwargs = spec.compile_args()
    return mod.compile(*args, **kwargs)


def hopper_launch(adapter, case: Case, inputs, outputs, *, tamper: Optional[str], initialize_outputs: bool, entry: str):
    """What every sm90 launch checks and prepares, on either entry point: no
    tamper, ``initialize_outputs=False`` only where the adapter declares
    "no-init", a Hopper (SM 9.0) device; then the inputs on it and the
    caller's (or fresh) O and Stats. Returns (inputs, o, lse)."""
    import torch

    from ground.data import make_outputs
    from kernels.base import require
    from kernels.environment import detect

    if tamper is not None:
        raise ValueError(f"tamper {tamper!r}: {entry} takes none")
    if not initialize_outputs:
        require(adapter, "no-init", case.describe())
    env = detect()
    if env.capability is None:
        raise Unsupported.machine(NO_GPU + f" (the {adapter.name} adapter can only compile_only() here)", adapter=adapter.name)
    if tuple(env.capability) != (9, 0):
        raise Unsupported.machine(f"{entry} launches on SM 9.0 only (sm_90a artifacts); this is {env.live_arch}", adapter=adapter.name)
    dev = torch.device("cuda", torch.cuda.current_device())
    o, lse = outputs if outputs is not None else make_outputs(case, dev)
    return inputs.to(dev), o, lse


# execute()'s operands: positional roles in order, then keyword -> role (THD: the cu prefixes).
POSITIONAL = ("q", "k", "v", "o", "lse")
KEYWORDS = {
    False: {"sinks": "sinks", "seq_q_lens": "seq_q_lens", "seq_kv_lens": "seq_kv_lens"},
    True: {"sinks": "sinks", "seq_q_lens": "cu_q", "seq_kv_lens": "cu_kv"},
}
# The caller's input buffers (CaseTensors fields) a change in place must reach; caller_buffers adds O and Stats.
CALLER_ROLES = ("q", "k", "v", "sinks", "seq_q_lens", "seq_kv_lens", "cu_q", "cu_kv")


def bound_operands(case: Case, inputs, o, lse) -> dict:
    """role -> the tensor ``execute()`` gets for it (None: not handed): dense,
    the caller's buffers as the Case lays them out; THD, ``thd.thd_launch``'s
    (the packed buffers, the cu prefixes, Stats in the binder's rank-2 form)."""
    if case.is_thd:
        t = thd.thd_launch(case, inputs, (o, lse))
        return dict(q=t.q, k=t.k, v=t.v, o=t.o, lse=t.lse, sinks=t.sinks, cu_q=t.q_lens, cu_kv=t.kv_lens)
    lens = dict(seq_q_lens=inputs.seq_q_lens, seq_kv_lens=inputs.seq_kv_lens)
    return dict(q=inputs.q, k=inputs.k, v=inputs.v, o=o, lse=lse if case.has_lse else None, sinks=inputs.sinks, **lens)


def execute_call(case: Case, bound: dict, workspace) -> tuple:
    """(args, kwargs) of ``SdpaFwdDslSm90.execute`` for ``bound`` operands:
    the Case's scale (natural units), the THD workspace."""
    kwargs = {kw: bound[role] for kw, role in KEYWORDS[case.is_thd].items()}
    kwargs["scale_softmax"] = case.scale
    if workspace is not None:
        kwargs["workspace"] = workspace
    return tuple(bound[r] for r in POSITIONAL), kwargs


def caller_buffers(inputs, outputs) -> dict:
    """role -> the caller's buffer (outputs None: the adapter's own, none of the caller's)."""
    out = {r: getattr(inputs, r) for r in CALLER_ROLES}
    if outputs is not None:
        out.update(o=outputs[0], lse=outputs[1])
    return {r: t for r, t in out.items() if t is not None}


def _same_memory(a, b) -> bool:
    return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def staged_operands(bound: dict, caller: dict) -> list:
    """Roles whose bound tensor lies outside the caller's buffer for it (a
    copy: a change the caller makes in place would not reach the kernel)."""
    return sorted(r for r, t in bound.items() if t is not None and r in caller and not _same_memory(t, caller[r]))


# The SM90 THD host's one output mode: the caller's O and Stats are not zeroed, and nothing outside a
# sequence is written (``initialize_outputs=True`` selects a mode only where a host has one: kernels.base).
THD_INIT = False


class Sm90Adapter:
    """The sm90 family's compile entry point (see the module doc)."""

    name = "sm90"
    entry = "prepared"  # the entry-point name (kernels.FAMILY_ADAPTERS) case files record
    label = "sm90 (prefill_d512_f16 via compile())"

    def __init__(self, rewrites=()):
        # kernels.source.Rewrite s of the sm90 sources (mutants): applied wherever the template is loaded.
        self.rewrites = tuple(rewrites)

    # "no-init": the SM90 THD host has no output-initialisation option; its O and Stats stores stop at
    # each sequence's end (per-sequence O tensor maps of extent s_b: frost/tile_dsl/thd.py emit_seq_descs;
    # Stats rows predicated on token < q_output_limit: prefill_d512_f16.py), so the capacity outside the
    # live tokens keeps the caller's bytes on every THD launch (THD_INIT).
    supports = frozenset({"caller-outputs", "compile-only", "no-init"})
    lacks = {"thd-addressing": "the sm90 family is forward only"}

    def _served(self, case: Case) -> None:
        if case.family != FAMILY.name:
            raise Unsupported.case(f"case field 'family' = {case.family!r}: the {self.name} adapter runs the sm90 family only", adapter=self.name)
        if case.is_bwd:
            raise Unsupported.case("case field 'direction' = 'bwd': the sm90 family is forward only", adapter=self.name)

    # ------------------------------------------------------ compile only
    def compile_only(self, case: Case, *, tamper: Optional[str] = None, live: bool = False) -> CompileDelta:
        """Plan and compile ``case`` for sm_90a from its facts alone (no CUDA
        call): the compile a run of it asks for (the same target: on a Hopper
        device the artifact is the run's). Raises the planner's or the
        template's exception for a Case they refuse."""
        if tamper is not None:
            raise ValueError(f"tamper {tamper!r}: the sm90 compile entry takes none")
        self._served(case)
        spec = specialize(case)
        with sm90_sources(self.rewrites), measure() as box:
            compile_spec(spec)
        return box.delta

    # ------------------------------------------------------------- run
    @timed("launch")
    def run(self, case: Case, inputs, outputs=None, *, initialize_outputs: bool = True, tamper: Optional[str] = None) -> KernelResult:
        """Launch ``case`` (dense or THD) on a Hopper GPU through the planner's
        compile() and execute() on the caller's buffers (O, LSE written in
        place): ``prepare``, one ``launch()``, its ``result()``."""
        prepared = self.prepare(case, inputs, outputs, initialize_outputs=initialize_outputs, tamper=tamper)
        prepared.launch()
        return prepared.result()

    def prepare(self, case: Case, inputs, outputs=None, *, initialize_outputs: bool = True, tamper: Optional[str] = None) -> Prepared:
        """Plan and compile ``case`` and bind its execute() arguments without
        launching: ``launch()`` is then ``execute()`` alone (the planner's, as
        often as asked, CUDA-graph capture included; whatever it does per call
        it does there), ``result()`` the KernelResult, ``staged`` the operands
        handed as copies of the caller's buffers (none: the sm90 host takes
        them as they are). The THD workspace is allocated here, once."""
        self._served(case)
        caller = caller_buffers(inputs, outputs)
        inputs, o, lse = hopper_launch(self, case, inputs, outputs, tamper=tamper, initialize_outputs=initialize_outputs, entry="the sm90 family")
        with sm90_sources(self.rewrites), measure() as box:
            api = plan(case, **(thd.PLAN_OVERRIDES if case.is_thd else {}))
            api.compile()
        notes = {
            "adapter": self.name,
            "family": FAMILY.name,
            "arch": FAMILY.arch,
            "params": repr(api.params),
            "compile_key": key_digest(specialization(api).key),
        }
        workspace = None
        if case.is_thd:  # the plan's size inside guard bands (the kernel writes its metadata there), at the template's alignment
            workspace = thd.guarded_workspace(api.scratch_workspace_bytes(), api._k_mod.PREPARED_WORKSPACE_ALIGNMENT, o.device)
            notes.update(lens_form="cu prefixes (Q and KV)", workspace=f"{workspace.numel()} bytes, adapter-allocated, guarded")
            notes["initialize_outputs"] = THD_INIT  # what ran, whatever was asked: the tails judge this mode
        bound = bound_operands(case, inputs, o, lse)
        args, kwargs = execute_call(case, bound, workspace)
        staged = staged_operands(bound, caller)
        notes["staged"] = staged
        # The Stats the kernel writes, as the caller lays them out (THD binds a rank-2 view of them).
        # The workspace is judged where it has bands (a GPU's; thd.guarded_workspace).
        guarded_ws = workspace if workspace is not None and guard_bands(workspace) is not None else None
        handed = {r: t for r, t in {**bound, "lse": lse if case.has_lse else None, "workspace": guarded_ws}.items() if t is not None}

        def launch() -> None:
            api.execute(*args, **kwargs)

        def result() -> KernelResult:
            return KernelResult(o, lse, box.delta, notes, handed)

        return Prepared(launch, result, staged)

    def backward(self, case: Case, *args, **kwargs) -> KernelResult:
        raise Unsupported("adapter", "the sm90 family is forward only: no SM90 backward", adapter=self.name, what=case.describe())
