"""The Case: one frozen, JSON-serializable set of graph facts plus a data seed.

A Case is the spine of the suite. A strategy draws it, a kernel adapter runs
it, a property judges the result against the reference, and it ends in the
report or in a repro file. The tensors are never stored: ``conformance.ground.data``
regenerates them bit for bit from the facts and ``seed``.

Conventions (shared by every module):
- Dense tensors are logically (B, H, S, D); ``memory`` says how they sit in
  storage. THD tensors are packed (T, H, D) with per-sequence lengths.
- ``window_left = -1`` means no sliding window; ``window_right = -1`` means no
  right band (a right band widens the causal diagonal and needs ``causal``).
- ``scale = None`` means the kernels' default, 1/sqrt(d_qk).
- ``violation`` names the contract rule a contract-violating Case breaks
  (``None`` for valid Cases); see ``strategies.violations``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

SCHEMA_VERSION = 1

from .tables import DTYPES  # noqa: E402,F401  (one definition, re-exported)
BIAS_DTYPES = ("float16", "bfloat16", "float32")
LAYOUTS = ("dense", "thd")
# Dense storage orders of Q/K/V/O. Every one keeps the head dim innermost and
# every outer stride a multiple of 8 elements, which is what the native
# pointer host serves (prepared_sm80.native_layouts).
MEMORY_ORDERS = ("bshd", "bhsd", "bshd_padded")
# Extra elements per token row in "bshd_padded" (a multiple of 8: 16-byte
# vector loads stay aligned).
ROW_PAD = 8


class CaseFileError(ValueError):
    """A case file (or dict) that cannot be turned into a Case; names the field."""


@dataclass(frozen=True)
class Case:
    layout: str = "dense"
    dtype: str = "float16"
    batch: int = 1
    h_q: int = 1
    h_kv: int = 1
    d_qk: int = 64
    d_v: int = 64
    # Dense: physical sequence lengths (the tensors' S axis).
    s_q: int = 1
    s_kv: int = 1
    # Dense padding lengths (per batch; None = operand absent).
    seq_q_lens: Optional[Tuple[int, ...]] = None
    seq_kv_lens: Optional[Tuple[int, ...]] = None
    # THD: per-sequence live lengths, first offsets and capacity slack.
    q_lens: Optional[Tuple[int, ...]] = None
    kv_lens: Optional[Tuple[int, ...]] = None
    q_base: int = 0
    kv_base: int = 0
    q_slack: int = 0
    kv_slack: int = 0
    # Mask family.
    causal: bool = False
    bottom_right: bool = False
    window_left: int = -1
    window_right: int = -1
    # Optional operands.
    bias: Optional[str] = None  # dtype name of a [bias_batch, H, SQ, SKV] bias, or None
    bias_batch: int = 1
    sinks: bool = False
    scale: Optional[float] = None
    memory: str = "bshd"
    seed: int = 0
    violation: Optional[str] = None

    # ------------------------------------------------------------------ derived
    @property
    def is_thd(self) -> bool:
        return self.layout == "thd"

    @property
    def n_seq(self) -> int:
        return len(self.q_lens) if self.is_thd else self.batch

    @property
    def softmax_scale(self) -> float:
        return 1.0 / math.sqrt(self.d_qk) if self.scale is None else float(self.scale)

    @property
    def t_q(self) -> int:
        """THD packed Q capacity (tokens): base + live + slack."""
        return self.q_base + sum(self.q_lens) + self.q_slack

    @property
    def t_kv(self) -> int:
        return self.kv_base + sum(self.kv_lens) + self.kv_slack

    @property
    def max_s_q(self) -> int:
        """The host-side bound on per-sequence Q length (THD grid); at least 1."""
        return max(1, max(self.q_lens)) if self.is_thd else self.s_q

    def q_lengths(self) -> Tuple[int, ...]:
        """Live Q length of every batch entry / sequence."""
        if self.is_thd:
            return tuple(self.q_lens)
        return tuple(self.seq_q_lens) if self.seq_q_lens is not None else (self.s_q,) * self.batch

    def kv_lengths(self) -> Tuple[int, ...]:
        if self.is_thd:
            return tuple(self.kv_lens)
        return tuple(self.seq_kv_lens) if self.seq_kv_lens is not None else (self.s_kv,) * self.batch

    def cu_seqlens(self, which: str) -> Tuple[int, ...]:
        """Cumulative offsets (with the non-zero first offset) for 'q' or 'kv'."""
        lens, base = (self.q_lens, self.q_base) if which == "q" else (self.kv_lens, self.kv_base)
        out = [base]
        for n in lens:
            out.append(out[-1] + n)
        return tuple(out)

    def mask_name(self) -> str:
        """A short label of the mask family, used by coverage and reports."""
        parts = []
        if self.causal:
            parts.append("causal_br" if self.bottom_right else "causal")
        if self.window_left >= 0:
            parts.append("swa_br" if (self.bottom_right and not self.causal) else "swa")
        if self.window_right >= 0:
            parts.append("band")
        return "+".join(parts) or "none"

    def replace(self, **changes) -> "Case":
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------ serialization
    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        for k, v in d.items():
            if isinstance(v, tuple):
                d[k] = list(v)
        return d

    def to_json(self) -> str:
        return json.dumps({"schema": SCHEMA_VERSION, "case": self.to_dict()}, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> "Case":
        if not isinstance(data, dict):
            raise CaseFileError(f"case: expected a JSON object, got {type(data).__name__}")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise CaseFileError(f"case field {unknown[0]!r}: unknown field (known: {', '.join(known)})")
        kwargs = {}
        for name, value in data.items():
            kwargs[name] = _coerce(name, value, _FIELD_TYPES[name])
        case = cls(**kwargs)
        problem = case.structural_problem()
        if problem:
            raise CaseFileError(problem)
        return case

    @classmethod
    def from_json(cls, text: str) -> "Case":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise CaseFileError(f"case file is not valid JSON: {e}") from None
        if not isinstance(doc, dict) or "schema" not in doc or "case" not in doc:
            raise CaseFileError("case file field 'schema'/'case': a case file is {\"schema\": N, \"case\": {...}}")
        if doc["schema"] != SCHEMA_VERSION:
            raise CaseFileError(f"case file field 'schema': version {doc['schema']!r} is not supported (this suite reads {SCHEMA_VERSION})")
        return cls.from_dict(doc["case"])

    def structural_problem(self) -> Optional[str]:
        """Facts that no kernel could be asked about (not contract violations:
        those are meaningful Cases). Returns a message naming the field."""
        if self.layout not in LAYOUTS:
            return f"case field 'layout': {self.layout!r} is not one of {LAYOUTS}"
        if self.dtype not in DTYPES:
            return f"case field 'dtype': {self.dtype!r} is not one of {DTYPES}"
        if self.memory not in MEMORY_ORDERS:
            return f"case field 'memory': {self.memory!r} is not one of {MEMORY_ORDERS}"
        if self.bias is not None and self.bias not in BIAS_DTYPES + ("float64", "int32"):
            return f"case field 'bias': {self.bias!r} is not a dtype name"
        for name in ("batch", "h_q", "h_kv", "d_qk", "d_v", "s_q", "s_kv", "bias_batch"):
            if getattr(self, name) < 1:
                return f"case field {name!r}: must be >= 1, got {getattr(self, name)}"
        for name in ("q_base", "kv_base", "q_slack", "kv_slack"):
            if getattr(self, name) < 0:
                return f"case field {name!r}: must be >= 0, got {getattr(self, name)}"
        if self.is_thd:
            if self.q_lens is None or self.kv_lens is None:
                return "case field 'q_lens'/'kv_lens': a THD case needs both length lists"
            if len(self.q_lens) != len(self.kv_lens) or not self.q_lens:
                return "case field 'kv_lens': must be as long as 'q_lens' (one entry per sequence, at least one)"
            if any(n < 0 for n in self.q_lens + self.kv_lens):
                return "case field 'q_lens'/'kv_lens': lengths must be >= 0"
        else:
            for name, phys in (("seq_q_lens", self.s_q), ("seq_kv_lens", self.s_kv)):
                lens = getattr(self, name)
                if lens is not None:
                    if len(lens) != self.batch:
                        return f"case field {name!r}: needs {self.batch} entries (one per batch), got {len(lens)}"
                    if any(n < 0 or n > phys for n in lens):
                        return f"case field {name!r}: lengths must lie in [0, {phys}]"
        if self.scale is not None and not math.isfinite(self.scale):
            return "case field 'scale': must be finite"
        return None


_FIELD_TYPES = {
    "layout": str, "dtype": str, "batch": int, "h_q": int, "h_kv": int, "d_qk": int, "d_v": int,
    "s_q": int, "s_kv": int, "seq_q_lens": "lens", "seq_kv_lens": "lens", "q_lens": "lens", "kv_lens": "lens",
    "q_base": int, "kv_base": int, "q_slack": int, "kv_slack": int, "causal": bool, "bottom_right": bool,
    "window_left": int, "window_right": int, "bias": "optstr", "bias_batch": int, "sinks": bool,
    "scale": "optfloat", "memory": str, "seed": int, "violation": "optstr",
}
assert set(_FIELD_TYPES) == {f.name for f in dataclasses.fields(Case)}


def _coerce(name: str, value: Any, kind: Any) -> Any:
    def bad(expected: str):
        return CaseFileError(f"case field {name!r}: expected {expected}, got {value!r}")

    if kind is bool:
        if not isinstance(value, bool):
            raise bad("true/false")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        return value
    if kind is str:
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if kind == "optstr":
        if value is not None and not isinstance(value, str):
            raise bad("a string or null")
        return value
    if kind == "optfloat":
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number or null")
        return float(value)
    if kind == "lens":
        if value is None:
            return None
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise bad("a list of integers or null")
        return tuple(value)
    raise AssertionError(kind)


def load_case_file(path) -> Tuple[Case, dict]:
    """Read a case file written by the suite: returns (Case, the whole document).
    Raises CaseFileError with a message naming the field on anything malformed."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CaseFileError(f"case file {path}: cannot read it ({e.strerror})") from None
    case = Case.from_json(text)
    return case, json.loads(text)
