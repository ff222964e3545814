"""Megatron-core's Muon optimizer step of one rank of a pipeline stage
(`costmodel.optimizer_muon`, `costmodel.muon_sharding`), as the megatron runtime's stage
tail prices it in place of Adam's."""

from __future__ import annotations

from costmodel.muon_sharding import adam_tensors, worst_rank_share
from costmodel.optimizer_muon import muon_step_s
from costmodel.optimizer_passes import optimizer_step_time_s
from costmodel.optimizer_state import adam_state_bytes
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan


def muon_optimizer_step_s(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    stage: int,
    *,
    dense: float,
    expert: float,
    main_grad_bytes: int,
) -> float:
    """The optimizer step of the rank of ``stage`` (``dense`` and ``expert`` parameters in
    all) with the most optimizer state (`costmodel.muon_sharding.worst_rank_share`): Adam's
    passes (`costmodel.optimizer_passes.optimizer_step_time_s`) over its Adam parameters in
    `costmodel.muon_sharding.adam_tensors` tensors, with the zeroing of the whole gradient
    buffer, plus `costmodel.optimizer_muon.muon_step_s` over
    its matrices. The data-parallel wrapper's gradient-buffer passes are the caller's."""
    adam_bytes = adam_state_bytes(job.precision).total_bytes
    share = worst_rank_share(
        model, job, plan, stage, dense=dense, expert=expert, adam_bytes=adam_bytes
    )
    adam_s = optimizer_step_time_s(
        profile,
        shard_params=share.adam_params,
        local_params=dense + expert,
        mixed_precision=job.precision != "fp32",
        num_tensors=adam_tensors(model, plan, stage),
        main_grad_bytes=main_grad_bytes,
    )
    return adam_s + muon_step_s(profile, job, share.matrices, main_grad_bytes)
