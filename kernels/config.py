"""The ``config`` entry point of the contract table: the kernels' plan-time
validators (``config_sm80.validate_params`` / ``params_for_flavor`` and the
flavor pick), runnable on CPU."""

from __future__ import annotations

import dataclasses

from ground.case import Case
from ground.contracts import Rule
from kernels.specialize import specialize


def run_config(r: Rule, case: Case):
    """Drive the ``config`` entry point for rule ``r`` on ``case``:
    ``params_for_flavor(r.flavor)``; else ``specialize(case)`` (flavor pick +
    validate_params), then ``validate_params`` on the result with ``r.params``
    applied. Returns the TemplateParams or raises."""
    from cudnn.sdpa.fwd import config_sm80 as cfg

    if r.flavor is not None:
        return cfg.params_for_flavor(r.flavor)
    params = specialize(case).params
    if r.params:
        params = dataclasses.replace(params, **r.params)
        cfg.validate_params(params)
    return params
