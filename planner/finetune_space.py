"""The search space narrowed to the plans the cost model prices a LoRA job with.

A LoRA job (`TrainingJob.lora`) is priced on dense models (transformers and hybrid Mamba-2
models) with standard attention, on targets the model's layers hold, with
Adam, and without Megatron-FSDP (`specs.rules_lora`). The model and optimizer rules hold
for every plan or for none, so they are checked once, before the search, and refused with
the rule's message; Megatron-FSDP is taken out of the plan features the search generates,
so that the screen's best rows are ones the rules pass.
"""

from __future__ import annotations

import dataclasses

from planner.space import SearchSpace
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules_block import parallel_block_not_with_lora
from specs.rules_lora import (
    lora_needs_adam,
    lora_not_on_experts,
    lora_not_on_mla,
    lora_not_with_megatron_fsdp,
    lora_targets_in_model,
)

LORA_EXCLUDED_FEATURES = frozenset({"megatron_fsdp"})
"""Plan features (`SearchSpace.features`) a LoRA job is not priced with."""


def space_for_lora(
    space: SearchSpace, model: ModelSpec, cluster: ClusterSpec, job: TrainingJob
) -> SearchSpace:
    """``space`` for ``job``: unchanged without LoRA; for a LoRA job without
    `LORA_EXCLUDED_FEATURES`. `SpecError` (with the rule id) when no plan can pass the
    LoRA rules: a MoE or MLA model, a target no layer of the model holds, an optimizer
    other than Adam, Megatron-FSDP fixed on, or a parallel attention+MLP block."""
    if job.lora is None:
        return space
    fixed_fsdp = bool(space.fixed.get("use_megatron_fsdp", False))
    probe = ParallelPlan(use_megatron_fsdp=fixed_fsdp)
    checks = (
        lora_not_on_experts,
        lora_not_on_mla,
        lora_targets_in_model,
        lora_needs_adam,
        lora_not_with_megatron_fsdp,
        parallel_block_not_with_lora,
    )
    for check in checks:
        violation = check(model, cluster, job, probe)
        if violation is not None:
            raise SpecError(str(violation))
    return dataclasses.replace(space, features=space.features - LORA_EXCLUDED_FEATURES)
