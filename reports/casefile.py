"""Case files: one failing (or known-finding) example, replayable with one command.

<report-dir>/cases/<property>-<hash>.json holds the Case (the tensors are
regenerated from it bit for bit), the property and its keyword arguments,
where and how it ran, the failure's summary and detail, and what Hypothesis
offers to rerun the search. ``ground.case.load_case_file`` reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Optional

from ground.case import SCHEMA_VERSION, Case
from properties.recorder import jsonable

from .shards import CASES

REPRODUCE_RE = re.compile(r"@reproduce_failure\([^)]*\)")
SEED_RE = re.compile(r"--hypothesis-seed=(\d+)")


def case_key(property: str, case: dict, params: Optional[dict] = None) -> str:
    text = json.dumps({"property": property, "case": case, "params": params or {}}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def display_path(path) -> str:
    """Relative to the working directory when inside it: shorter to paste."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def repro_command(path) -> str:
    return f"sdpa-conformance repro {display_path(path)}"


def inputs_digest(case: Case) -> Optional[str]:
    """sha256 of the regenerated inputs (CPU), so a repro can tell that it
    rebuilt the very same bits. None if they cannot be built here."""
    try:
        import torch

        from ground.data import make_inputs

        t = make_inputs(case, "cpu")
    except Exception:  # noqa: BLE001 - a digest is a convenience, never a reason to lose the case file
        return None
    h = hashlib.sha256()
    for name in ("q", "k", "v", "bias", "sinks", "seq_q_lens", "seq_kv_lens", "cu_q", "cu_kv"):
        x = getattr(t, name)
        if x is not None:
            h.update(name.encode())
            h.update(x.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def hypothesis_info(text: str, seed=None, derandomize: Optional[bool] = None) -> dict:
    """Seed and @reproduce_failure blob found in a failure's text."""
    blob = REPRODUCE_RE.search(text or "")
    if seed is None:
        m = SEED_RE.search(text or "")
        seed = int(m.group(1)) if m else None
    info = {"seed": seed, "reproduce_failure": blob.group(0) if blob else None}
    if derandomize is not None:
        info["derandomize"] = derandomize
    return info


def write(
    report_dir,
    *,
    property: str,
    case: dict,
    params: Optional[dict] = None,
    summary: str,
    detail: Optional[dict] = None,
    nodeid: Optional[str] = None,
    environment: Optional[dict] = None,
    hypothesis: Optional[dict] = None,
    finding: Optional[str] = None,
    digest: Optional[str] = None,
    needs_gpu: Optional[bool] = None,
) -> Path:
    """Write the case file; returns its path (same property+case+params, same file)."""
    env = environment or {}
    path = Path(report_dir) / CASES / f"{property}-{case_key(property, case, params)}.json"
    doc = {
        "schema": SCHEMA_VERSION,
        "case": case,
        "property": property,
        "params": params or {},
        "adapter": env.get("adapter"),
        "sm80_compat": env.get("sm80_compat", False),
        "mode": (env.get("family_modes") or {}).get(case.get("family"), env.get("mode")),
        "kernels_source": env.get("kernels_source"),
        "versions": env.get("versions", {}),
        "gpu": env.get("gpu"),
        # Whether the test that failed used the ``gpu`` fixture (None: unknown).
        "needs_gpu": needs_gpu,
        "nodeid": nodeid,
        "summary": summary,
        "detail": detail or {},
        "finding": finding,
        "hypothesis": hypothesis or {"seed": None, "reproduce_failure": None},
        "inputs_sha256": digest,
        "repro": repro_command(path),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    # Strict JSON (inf/nan as strings): other tools read these files too.
    tmp.write_text(json.dumps(strict(doc), indent=1, default=jsonable) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # two workers failing on one case never leave a torn file
    return path


def strict(value):
    """Replace non-finite floats by strings so the document is strict JSON."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return repr(value)
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return value
