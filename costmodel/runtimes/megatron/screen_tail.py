"""Gradient and tail columns of the closed-form screen (`costmodel.runtimes.megatron.screen`).

Over the screen's per-plan columns ``c`` (numpy arrays, one entry per plan row), in
seconds, what an iteration spends after its pipeline phase:

- gradients (`gradients_done_s`): the last bucket of stage 0 (or everything without
  `overlap_grad_reduce`), and the single bucket of stages 1 and p-1 less their head start
  of s·(backward per chunk), as `costmodel.runtimes.megatron.grad_reduction` schedules
  them; Megatron-FSDP sharding gradients reduces every microbatch's
  (`costmodel.runtimes.megatron.screen_sharding`);
- the tail (`tail_s`): the optimizer step and the exposed parameter all-gather as in
  `costmodel.runtimes.megatron.optimizer_step` and
  `costmodel.runtimes.megatron.param_gather`, for stage 0, the last stage and (under
  Megatron-FSDP or Muon) the fullest middle stage; Megatron-FSDP's per-layer gathers of
  `costmodel.runtimes.megatron.megatron_fsdp`; under Muon the worst rank's step and
  `dist_muon`'s gather after the step (`costmodel.runtimes.megatron.screen_muon`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.execution import ExecutionOptions
from costmodel.execution_derived import fp8_weight_storage
from costmodel.optimizer_muon import is_muon
from costmodel.optimizer_offload import host_optimizer_step_s
from costmodel.optimizer_passes import grad_buffer_passes_time_s, optimizer_step_tensors
from costmodel.runtimes.megatron.screen_muon import layerwise_gather_s, worst_step_s
from costmodel.runtimes.megatron.screen_parts import affine_s
from costmodel.runtimes.megatron.screen_pipeline import StageTimes
from costmodel.runtimes.megatron.screen_sharding import (
    closed_form_fsdp_gather_s,
    fsdp_reduce_exposed_s,
    fsdp_reduce_per_microbatch_s,
    optimizer_units,
)
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec


def _earlier_chunks_s(per_chunk: np.ndarray, v: np.ndarray, spacing: np.ndarray) -> np.ndarray:
    """How long after a stage's last backward its gradient stream is still busy with chunks
    1..v-1, whose single buckets start ``spacing`` apart in the cooldown (chunk k's last
    backward ends k·spacing before the stage's end); -inf without such chunks."""
    behind = np.maximum(per_chunk - spacing, (v - 1) * (per_chunk - spacing))
    return np.where(v > 1, behind, -np.inf)


def gradients_done_s(
    c: dict[str, np.ndarray],
    times: StageTimes,
    pipeline: np.ndarray,
    grad_bytes: float,
    m: np.ndarray,
) -> np.ndarray:
    """When the last stage has its gradients reduced (the optimizer's start), seconds from
    the iteration's start; ``pipeline`` is the pipeline phase
    (`costmodel.runtimes.megatron.screen_pipeline.pipeline_s`), ``grad_bytes`` the bytes
    of a reduced gradient element.

    Stage 0: chunks v-1..1 reduce as single buckets during the cooldown (their last
    backwards end pp chunk-backwards apart), then chunk 0's buckets, which fill during its
    last backward. Stages 1 and p-1 reduce one bucket per chunk and finish their pipeline
    s chunk-backwards before stage 0. Megatron-FSDP sharding gradients reduces every
    microbatch's (`screen_sharding.fsdp_reduce_exposed_s`).
    """
    (_, b0), (_, bm), _ = times
    v, pp, nb = c["vpp"], c["pp"], c["nb0"]
    m = np.maximum(m, 1)
    every = c["use_megatron_fsdp"].astype(bool) & c["grads_sharded"].astype(bool)

    def fsdp_exposed(tag: str, stage_times) -> np.ndarray:
        reduce_s = fsdp_reduce_per_microbatch_s(c, tag, grad_bytes)
        return fsdp_reduce_exposed_s(c, tag, reduce_s, stage_times, m)

    def t(tag: str, params: np.ndarray) -> np.ndarray:
        return affine_s(c[f"{tag}_a"], c[f"{tag}_b"], params * grad_bytes)

    overlap = c["overlap_grad_reduce"].astype(bool)
    rest = c["chunk0"] - (nb - 1) * c["bucket"]
    total0 = (nb - 1) * t("g", c["bucket"]) + t("g", rest) + t("ge", c["p0e"] / v)
    others = t("g", (c["p0d"] - c["chunk0"]) / np.maximum(v - 1, 1)) + t("ge", c["p0e"] / v)
    backlog = _earlier_chunks_s(others, v, pp * b0 / v)
    lagged = np.maximum(t("g", rest), total0 - (b0 / v) * (nb - 1) / nb)
    lagged = np.maximum(lagged, backlog + total0)
    exposed0 = np.where(overlap, lagged, v * t("g", c["p0d"] / v) + v * t("ge", c["p0e"] / v))
    exposed0 = np.where(every, fsdp_exposed("0", times[0]), exposed0)
    tie = np.where(c["tied"] & (pp > 1), t("tie", c["emb_params"]), 0.0)
    norm = np.where(c["sequence_parallel"], t("norm", c["norm_params"]), 0.0)
    done = pipeline + exposed0 + tie + norm
    for tag, stage, extra in (("1", 1, 0.0), ("l", pp - 1, tie)):
        per_chunk = t("g", c[f"p{tag}d"] / v) + t("ge", c[f"p{tag}e"] / v)
        queued = np.maximum(per_chunk, _earlier_chunks_s(per_chunk, v, pp * bm / v) + per_chunk)
        exposed = np.where(overlap, queued, v * per_chunk)
        exposed = np.where(every, fsdp_exposed(tag, times[1 if tag == "1" else 2]), exposed)
        head_start = stage * bm / v
        later = np.maximum(done, pipeline - head_start + exposed + extra + norm)
        done = np.where((pp > 1) & (pp > stage), later, done)
    return done


@dataclass(frozen=True, kw_only=True, slots=True)
class _StepRates:
    """The optimizer step's affine form per row and its per-parameter seconds
    (`costmodel.runtimes.megatron.optimizer_step.stage_optimizer_s`)."""

    alpha: np.ndarray
    """Seconds per shard parameter of the Adam step (with or without Megatron-FSDP)."""
    beta: np.ndarray
    """Seconds per stage parameter."""
    per_tensor: np.ndarray
    """Seconds per parameter tensor beyond the first."""
    base: np.ndarray
    """Seconds per step."""
    host_s: float
    """The host's part of an offloaded step, per shard parameter."""
    scaled_s: float
    """Gradient-buffer passes per element with the division by the group size."""
    unscaled_s: float
    """Gradient-buffer passes per element without it (a group of one rank)."""


def _step_rates(
    c: dict[str, np.ndarray], profile: HardwareProfile, job: TrainingJob, options: ExecutionOptions
) -> _StepRates:
    """The `_StepRates` of every row: Adam's affine units without and with Megatron-FSDP
    (`screen_sharding.optimizer_units`), the offloaded host step and the data-parallel
    wrapper's gradient-buffer passes, each per parameter."""
    fsdp = c["use_megatron_fsdp"].astype(bool)
    units = np.array([optimizer_units(profile, job, options, under_fsdp) for under_fsdp in (0, 1)])
    alpha, beta, per_tensor, base = (np.where(fsdp, units[1, i], units[0, i]) for i in range(4))
    offload = options.optimizer_cpu_offload_fraction
    host = (
        host_optimizer_step_s(profile, offload * 1e9, overlap=options.overlap_cpu_optimizer_d2h_h2d)
        / 1e9
    )
    scaled, unscaled = (
        grad_buffer_passes_time_s(
            profile, 1e9, options.main_grad_bytes, scale=scale, nan_check=options.grad_nan_check
        )
        / 1e9
        for scale in (True, False)
    )
    return _StepRates(
        alpha=alpha,
        beta=beta,
        per_tensor=per_tensor,
        base=base,
        host_s=host,
        scaled_s=scaled,
        unscaled_s=unscaled,
    )


def _optimizer_s(
    c: dict[str, np.ndarray],
    tag: str,
    rates: _StepRates,
    local_experts: np.ndarray | int,
    muon: bool,
    lora: bool = False,
) -> np.ndarray:
    """Optimizer step of stage ``tag``'s rank, seconds: Adam's affine form (or the offloaded
    host step, whichever is longer), under Muon the worst rank's step
    (`screen_muon.worst_step_s`), plus the gradient-buffer passes; with ``lora`` the
    stage's adapters (``ad{tag}``) are the step's tensors, else its layers' and its tensors
    outside them (``o{tag}``) (`costmodel.optimizer_passes.optimizer_step_tensors`)."""
    dense, expert = c[f"p{tag}d"], c[f"p{tag}e"]
    layers = c[f"n{tag}"]
    adapters = c[f"ad{tag}"] if lora else None
    tensors = optimizer_step_tensors(layers, local_experts, adapters, outside=c[f"o{tag}"])
    sharded = c["optim_sharded"]
    shard = np.where(sharded, dense / (c["dp"] * c["cp"]) + expert / c["edp"], dense + expert)
    optimizer = (
        rates.alpha * shard
        + rates.beta * (dense + expert)
        + rates.per_tensor * (tensors - 1)
        + rates.base
    )
    optimizer = np.maximum(optimizer, rates.host_s * shard)  # offloaded_step_s
    if muon:  # the worst rank's Muon and Adam parts (optimizer_step.stage_optimizer_s)
        optimizer = worst_step_s(c, tag)
    optimizer += dense * np.where(c["dp"] * c["cp"] > 1, rates.scaled_s, rates.unscaled_s)
    optimizer += expert * np.where(c["edp"] > 1, rates.scaled_s, rates.unscaled_s)
    return optimizer


def _param_gather_s(
    c: dict[str, np.ndarray],
    tag: str,
    first_stage: bool,
    forward_chunk: np.ndarray,
    weight_bytes: int,
    gather_bytes: float,
    muon: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """One chunk's parameter all-gather and its exposed part over the stage, seconds
    (`costmodel.runtimes.megatron.param_gather`).

    With `overlap_param_gather` the gathers run in forward order from the iteration start;
    bucket i of chunk 0 is needed when the first forward reaches it, chunk k when its first
    forward starts (k·pp forwards in, interleaved), and the exposed time is the largest
    lateness, as in the simulator. ``weight_bytes`` is the bytes of a gathered weight that
    is not a linear layer's or is one of a layer kept in bf16 (``p{tag}l16``,
    ``p{tag}e16``), ``gather_bytes`` of a linear layer's
    (`costmodel.memory_allowances.Fp8WeightStorage.gather_bytes`)."""
    v, pp = c["vpp"], c["pp"]
    dense, expert = c[f"p{tag}d"], c[f"p{tag}e"]
    kept_expert = c[f"p{tag}e16"]  # the layers kept in bf16 gather at the weight bytes
    dense_linear = c[f"p{tag}l"] - expert - (c[f"p{tag}l16"] - kept_expert)
    dense_bytes = (dense - dense_linear) * weight_bytes + dense_linear * gather_bytes
    expert_bytes = expert * gather_bytes + kept_expert * (weight_bytes - gather_bytes)
    chunk = affine_s(c["ag_a"], c["ag_b"], dense_bytes / v)
    chunk += affine_s(
        c["age_a"],
        c["age_b"],
        expert / v * gather_bytes + kept_expert / v * (weight_bytes - gather_bytes),
    )
    nb = c["nb0"] if first_stage else np.ones(len(v))
    start = 0.0 if first_stage else (pp - 1) * forward_chunk
    first = np.maximum(chunk / nb, chunk - forward_chunk * (nb - 1) / nb) - start
    later_chunks = v * chunk - (v - 1) * pp * forward_chunk - start
    late = np.maximum(first, np.where(v > 1, later_chunks, -np.inf))
    gather_s = np.where(c["overlap_param_gather"].astype(bool), np.maximum(late, 0.0), v * chunk)
    if muon:  # dist_muon gathers the whole stage once after the step
        whole = layerwise_gather_s(c, dense_bytes, expert_bytes)
        gather_s = np.where(c["layerwise_sharded"], whole, gather_s)
    return chunk, gather_s


def tail_s(
    c: dict[str, np.ndarray],
    times: StageTimes,
    profile: HardwareProfile,
    job: TrainingJob,
    model: ModelSpec,
    options: ExecutionOptions,
    m: np.ndarray,
) -> np.ndarray:
    """Optimizer step plus exposed parameter all-gather, seconds, worst of stages 0 and
    p-1 (and of the fullest middle stage under Megatron-FSDP or Muon); ``m`` is the number
    of microbatches (at least 1)."""
    (f0, _), _, _ = times
    v, pp = c["vpp"], c["pp"]
    weight = 4 if job.precision == "fp32" else 2
    gather = fp8_weight_storage(options).gather_bytes(job)  # bytes per gathered weight
    fsdp = c["use_megatron_fsdp"].astype(bool)
    rates = _step_rates(c, profile, job, options)
    local_experts = model.num_experts // c["ep"] if model.is_moe else 0
    distopt = c["distributed_optimizer"].astype(bool)
    muon = is_muon(job)
    forward_chunk = f0 / v
    worst = np.zeros(len(v))
    # stage 0, the last stage and, for Megatron-FSDP (whose gathers grow with a stage's
    # parameters), the fullest middle stage
    for tag, first_stage in (("0", True), ("l", False), ("1", False)):
        optimizer = _optimizer_s(c, tag, rates, local_experts, muon, job.lora is not None)
        chunk, gather_s = _param_gather_s(c, tag, first_stage, forward_chunk, weight, gather, muon)
        tail = optimizer + np.where(distopt | c["layerwise_sharded"], gather_s, 0.0)
        stage_times = times[{"0": 0, "1": 1, "l": 2}[tag]]
        reduce_s = fsdp_reduce_per_microbatch_s(c, tag, float(options.main_grad_bytes))
        tail += closed_form_fsdp_gather_s(c, tag, chunk, stage_times, m, reduce_s)
        counted = pp > 2 if tag == "1" else pp > 1
        if tag == "1" and not muon:  # under Muon the middle stage's worst rank may step most
            counted &= fsdp
        worst = np.maximum(worst, tail if first_stage else np.where(counted, tail, 0.0))
    return worst
