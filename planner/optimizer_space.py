"""The search space narrowed to the plans Megatron-core runs the job's optimizer with.

Muon (`TrainingJob.optimizer` ``muon`` or ``dist_muon``, `costmodel.optimizer_muon`) runs
without the distributed optimizer and without Megatron-FSDP, and ``muon`` (not layer-wise)
also without overlapped gradient reduction and parameter gather (`specs.rules_optimizer`).
The search generates only such plans, so that the screen's best rows are ones the rules
pass.
"""

from __future__ import annotations

import dataclasses

from planner.space import SearchSpace
from specs.errors import SpecError
from specs.job import TrainingJob

MUON_EXCLUDED_FEATURES = frozenset({"distributed_optimizer", "megatron_fsdp"})
"""Plan features (`SearchSpace.features`) a Muon job never uses."""


def space_for_optimizer(space: SearchSpace, job: TrainingJob) -> SearchSpace:
    """``space`` for ``job``'s optimizer: unchanged for Adam; for Muon without
    `MUON_EXCLUDED_FEATURES` and, for ``muon``, with both overlap switches fixed off unless
    the user fixed them. `SpecError` when the space only admits sharded optimizers
    (`SearchSpace.sharded_optimizer_only`: the precision-aware optimizer, which Megatron-core
    does not run with Muon)."""
    if job.optimizer == "adam":
        return space
    if space.sharded_optimizer_only:
        raise SpecError(
            f"optimizer ({job.optimizer}) runs without the distributed optimizer, while the "
            "precision-aware optimizer needs it (and Megatron-core's Muon does not support "
            "it): drop --use-precision-aware-optimizer, or use --optimizer adam"
        )
    fixed = dict(space.fixed)
    if job.optimizer == "muon":
        for name in ("overlap_grad_reduce", "overlap_param_gather"):
            fixed.setdefault(name, False)
    return dataclasses.replace(space, features=space.features - MUON_EXCLUDED_FEATURES, fixed=fixed)
