"""Closed-form estimate over many candidate plans at once, for the planner's screening.

Input: a DataFrame with one row per plan and the `ParallelPlan` knobs as columns,
normalized by `costmodel.plan_frame.normalized_frame`. Output: the same rows with
`num_microbatches`, `iteration_time_s`, `tokens_per_s`, `mfu`, `peak_memory_bytes`,
`peak_memory_gib`, `fits` and approximate phase columns.

How it stays fast and consistent with the event simulator (`costmodel.runtimes.megatron.pricing`):
per-layer costs come from the same `costmodel.runtimes.megatron.layer_costs` functions, evaluated
once per distinct layer shape (tp, cp, micro-batch, SP, EP, ETP, overlap, CP exchange, and the
per-module recompute set and activation offloading of `ParallelPlan`); group
placements come from `costmodel.topology.strided_group_placement`; collective times are linear in
bytes for a fixed group, so one (latency, seconds per byte) pair per distinct group serves every
row. Everything else is numpy arithmetic over the rows:

- pipeline (Narayanan et al. 2021 §2.2, checked against the simulator): with per-stage
  microbatch times T_s (forward + backward + recompute, plus the blocking sends of its
  chunks under 1F1B or without `ExecutionOptions.overlap_p2p`), 1F1B takes
  (m - 1)·max T_s + Σ T_s; interleaved takes m·max T_s + (Σ T_s - max T_s)/v plus, with
  asynchronous sends, 2·(p·v - 1) send delays (the first microbatch's forward through
  every virtual stage and the last one's backward); a scattered send
  (`pipeline_scatter_gather`) moves 1/tp of the tensor and all-gathers it over tp;
- gradients: the last bucket of stage 0 (or everything without overlap), and the single
  bucket of stages 1 and p-1 less their head start of s·(backward per chunk);
- parameter all-gather, optimizer step and memory as in
  `costmodel.runtimes.megatron.param_gather`, `costmodel.runtimes.megatron.optimizer_step` and
  `costmodel.memory`, for stage 0, stage 1 and the last stage; under Megatron-FSDP the
  sharded weights, gradients and optimizer state of
  `costmodel.runtimes.megatron.megatron_fsdp` and its parameter gathers (per layer and pass
  under `optim_grads_params`);
- Muon (`muon`, `dist_muon`): the optimizer state and step of the rank with the most state
  and `dist_muon`'s gather after the step, from the simulator's functions once per distinct
  layout (`costmodel.runtimes.megatron.screen_muon`).

Agreement with the simulator is within 5% on uniform dense models, Muon included (tested);
MoE models with leading dense layers and non-default recompute layer counts use layer
averages, and fine-grained activation offloading's one layer kept in flight is averaged over
the layers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from costmodel import compute as ops
from costmodel.activations import (
    recomputed_layers,
)
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.flops import model_flops_per_iteration
from costmodel.memory import bytes_per_param, device_optimizer_bytes, step_peak_bytes
from costmodel.memory_allowances import Fp8WeightStorage, FrameworkAllowance, GiB
from costmodel.optimizer_muon import is_muon
from costmodel.optimizer_offload import host_optimizer_step_s
from costmodel.optimizer_passes import grad_accumulation_time_s, grad_buffer_passes_time_s
from costmodel.optimizer_state import DEFAULT_PRECISION, OptimizerPrecision, with_offload
from costmodel.plan_frame import SPLIT_COLUMNS, per_distinct_row, row_plan
from costmodel.runtimes.megatron.megatron_fsdp import (
    GATHERED_LAYERS,
)
from costmodel.runtimes.megatron.screen_muon import (
    layerwise_gather_s,
    muon_columns,
    worst_state_bytes,
    worst_step_s,
    worst_working_bytes,
)
from costmodel.runtimes.megatron.screen_parts import (
    SAVER_KEY,
    activation_columns,
    affine_s,
    priced_parts,
)
from costmodel.runtimes.megatron.screen_sharding import (
    SHARDING_COLUMNS,
    adam_state_per_row,
    closed_form_fsdp_gather_s,
    fsdp_reduce_exposed_s,
    fsdp_reduce_per_microbatch_s,
    optimizer_units,
    precision_aware_allowed,
    with_sharding,
)
from costmodel.topology import scale_up_domain_size
from profiles.lookup import peak_flops
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.pipeline_split import split_problem


def _recompute_fraction(model: ModelSpec):
    def fn(row: Mapping[str, Any]) -> dict[str, float]:
        plan = row_plan(row)
        if plan.recompute != "full":
            return {"rc_frac": 1.0 if plan.recompute == "selective" else 0.0}
        if split_problem(model, plan) is not None:  # marked invalid by screen_plans
            return {"rc_frac": 1.0}
        return {"rc_frac": len(recomputed_layers(model, plan)) / model.num_layers}

    return fn


def _in_flight(
    pp: np.ndarray, vpp: np.ndarray, m: np.ndarray, stage: np.ndarray, chunk: np.ndarray
):
    """Microbatches of ``chunk`` that ``stage`` holds at its peak, and the total over chunks
    (`costmodel.activations.in_flight_chunk_counts` in closed form)."""
    one_f_one_b = np.minimum(pp - stage, m)
    held = np.minimum(2 * (pp - stage - 1) + (vpp - 1) * pp + 1, m * vpp)
    groups, rest = held // pp, held % pp
    per_chunk = pp * (groups // vpp + (chunk < groups % vpp)) + np.where(
        groups % vpp == chunk, rest, 0
    )
    interleaved = vpp > 1
    return (np.where(interleaved, per_chunk, one_f_one_b), np.where(interleaved, held, one_f_one_b))


def _stage_times(c: dict[str, np.ndarray], model: ModelSpec, recompute: np.ndarray, accumulate):
    """Per-microbatch (forward, backward incl. recompute) of stages 0, middle and last.

    ``accumulate(params)`` is the unfused gradient-accumulation time of that many
    parameters (zero with gradient-accumulation fusion)."""

    def per_stage(tag: str, name: str) -> np.ndarray:
        return c[f"n{tag}d"] * c[f"{name}_d"] + c[f"n{tag}m"] * c[f"{name}_m"]

    def stage(tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        redo = np.where(recompute == "selective", per_stage(tag, "r"), 0.0)
        redo = np.where(recompute == "full", c["rc_frac"] * per_stage(tag, "f"), redo)
        redo_c = np.where(recompute == "selective", per_stage(tag, "rc"), 0.0)
        redo_c = np.where(recompute == "full", c["rc_frac"] * per_stage(tag, "fc"), redo_c)
        mtp = c[f"mtp{tag}"]  # each MTP layer has its own output layer and loss
        f = per_stage(tag, "f") + mtp * c["log_f"]
        b = per_stage(tag, "b") + redo + mtp * c["log_b"]
        compute = per_stage(tag, "fc") + per_stage(tag, "bc") + redo_c + mtp * c["log_c"]
        return f, b, compute

    f, b, compute = stage("0")
    fm, bm, _ = stage("1")
    fl, bl, _ = stage("l")
    single = c["pp"] == 1
    f0, b0 = f + c["emb_f"] + np.where(single, c["log_f"], 0.0), b + c["emb_b"]
    b0 = b0 + np.where(single, c["log_b"], 0.0) + accumulate(c["p0d"] + c["p0e"])
    bm = bm + accumulate(c["p1d"] + c["p1e"])
    fl, bl = fl + c["log_f"], bl + c["log_b"] + accumulate(c["pld"] + c["ple"])
    compute0 = compute + c["emb_c"] + np.where(single, c["log_c"], 0.0)
    return (f0, b0), (fm, bm), (fl, bl), compute0


def _pipeline_s(
    c: dict[str, np.ndarray], times, send: np.ndarray, m: np.ndarray, overlap_p2p: bool
) -> np.ndarray:
    (f0, b0), (fm, bm), (fl, bl) = times
    pp, vpp = c["pp"], c["vpp"]
    blocking = (pp > 1) & ((vpp == 1) | (not overlap_p2p))
    # Blocking sends per microbatch: every chunk's forward and backward sends, except the
    # first stage's chunk-0 backward and the last stage's last-chunk forward.
    t0 = f0 + b0 + np.where(blocking, (2 * vpp - 1) * send, 0.0)
    tm = fm + bm + np.where(blocking, 2 * vpp * send, 0.0)
    tl = fl + bl + np.where(blocking, (2 * vpp - 1) * send, 0.0)
    middle = np.maximum(pp - 2, 0)
    t_max = np.maximum(np.maximum(t0, tl), np.where(middle > 0, tm, 0.0))
    t_sum = t0 + tl + middle * tm
    one_f_one_b = (m - 1) * t_max + t_sum
    arrivals = np.where(blocking, 0.0, 2 * (pp * vpp - 1) * send)
    interleaved = m * t_max + (t_sum - t_max) / vpp + arrivals
    return np.where(pp == 1, m * (f0 + b0), np.where(vpp == 1, one_f_one_b, interleaved))


def _earlier_chunks_s(per_chunk: np.ndarray, v: np.ndarray, spacing: np.ndarray) -> np.ndarray:
    """How long after a stage's last backward its gradient stream is still busy with chunks
    1..v-1, whose single buckets start ``spacing`` apart in the cooldown (chunk k's last
    backward ends k·spacing before the stage's end); -inf without such chunks."""
    behind = np.maximum(per_chunk - spacing, (v - 1) * (per_chunk - spacing))
    return np.where(v > 1, behind, -np.inf)


def _gradients_s(c, times, pipeline: np.ndarray, grad_bytes: float, m: np.ndarray) -> np.ndarray:
    """When the last stage has its gradients reduced (the optimizer's start).

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


def _tail_s(
    c,
    times,
    profile: HardwareProfile,
    job: TrainingJob,
    model: ModelSpec,
    options: ExecutionOptions,
    m: np.ndarray,
) -> np.ndarray:
    """Optimizer step plus exposed parameter all-gather, worst of stages 0 and p-1 (and of
    the fullest middle stage under Megatron-FSDP).

    With `overlap_param_gather` the gathers run in forward order from the iteration start;
    bucket i of chunk 0 is needed when the first forward reaches it, chunk k when its first
    forward starts (k·pp forwards in, interleaved), and the exposed time is the largest
    lateness, as in the simulator.
    """
    (f0, _), _, _ = times
    v, pp = c["vpp"], c["pp"]
    weight = 4 if job.precision == "fp32" else 2
    gather = options.fp8_weight_storage.gather_bytes(job)  # bytes per gathered weight
    fsdp = c["use_megatron_fsdp"].astype(bool)
    # the optimizer step's affine form per Adam state: without and with Megatron-FSDP
    units = np.array([optimizer_units(profile, job, options, under_fsdp) for under_fsdp in (0, 1)])
    alpha, beta, per_tensor, base = (np.where(fsdp, units[1, i], units[0, i]) for i in range(4))
    # the host's part of an offloaded step (optimizer_step.stage_optimizer_s), per shard parameter
    offload = options.optimizer_cpu_offload_fraction
    host = (
        host_optimizer_step_s(profile, offload * 1e9, overlap=options.overlap_cpu_optimizer_d2h_h2d)
        / 1e9
    )
    # The data-parallel wrapper's gradient-buffer passes (optimizer_step.stage_optimizer_s),
    # per element:
    # with the division by the group size (groups of 2+ ranks) and without.
    scaled, unscaled = (
        grad_buffer_passes_time_s(
            profile, 1e9, options.main_grad_bytes, scale=scale, nan_check=options.grad_nan_check
        )
        / 1e9
        for scale in (True, False)
    )
    local_experts = model.num_experts // c["ep"] if model.is_moe else 0
    distopt = c["distributed_optimizer"].astype(bool)
    muon = is_muon(job)
    forward_chunk = f0 / v
    worst = np.zeros(len(v))
    # stage 0, the last stage and, for Megatron-FSDP (whose gathers grow with a stage's
    # parameters), the fullest middle stage
    for tag, first_stage in (("0", True), ("l", False), ("1", False)):
        dense, expert = c[f"p{tag}d"], c[f"p{tag}e"]
        tensors = (c[f"n{tag}d"] + c[f"n{tag}m"]) * (8 + 2 * local_experts) + 2
        sharded = c["optim_sharded"]
        shard = np.where(sharded, dense / (c["dp"] * c["cp"]) + expert / c["edp"], dense + expert)
        optimizer = alpha * shard + beta * (dense + expert) + per_tensor * (tensors - 1) + base
        optimizer = np.maximum(optimizer, host * shard)  # offloaded_step_s
        if muon:  # the worst rank's Muon and Adam parts (optimizer_step.stage_optimizer_s)
            optimizer = worst_step_s(c, tag)
        optimizer += dense * np.where(c["dp"] * c["cp"] > 1, scaled, unscaled)
        optimizer += expert * np.where(c["edp"] > 1, scaled, unscaled)
        dense_linear = c[f"p{tag}l"] - expert
        dense_bytes = (dense - dense_linear) * weight + dense_linear * gather
        chunk = affine_s(c["ag_a"], c["ag_b"], dense_bytes / v)
        chunk += affine_s(c["age_a"], c["age_b"], expert / v * gather)
        nb = c["nb0"] if first_stage else np.ones(len(v))
        start = 0.0 if first_stage else (pp - 1) * forward_chunk
        first = np.maximum(chunk / nb, chunk - forward_chunk * (nb - 1) / nb) - start
        later_chunks = v * chunk - (v - 1) * pp * forward_chunk - start
        late = np.maximum(first, np.where(v > 1, later_chunks, -np.inf))
        gather_s = np.where(
            c["overlap_param_gather"].astype(bool), np.maximum(late, 0.0), v * chunk
        )
        if muon:  # dist_muon gathers the whole stage once after the step
            whole = layerwise_gather_s(c, dense_bytes, expert * gather)
            gather_s = np.where(c["layerwise_sharded"], whole, gather_s)
        tail = optimizer + np.where(distopt | c["layerwise_sharded"], gather_s, 0.0)
        stage_times = times[{"0": 0, "1": 1, "l": 2}[tag]]
        reduce_s = fsdp_reduce_per_microbatch_s(c, tag, float(options.main_grad_bytes))
        tail += closed_form_fsdp_gather_s(c, chunk, stage_times, m, model.num_layers, reduce_s)
        counted = pp > 2 if tag == "1" else pp > 1
        if tag == "1" and not muon:  # under Muon the middle stage's worst rank may step most
            counted &= fsdp
        worst = np.maximum(worst, tail if first_stage else np.where(counted, tail, 0.0))
    return worst


def _memory_bytes(
    c,
    model: ModelSpec,
    job: TrainingJob,
    m: np.ndarray,
    main_grad_bytes: int,
    fp8_weights: Fp8WeightStorage,
    keep_outputs: bool = False,
    ddp_gradient_copy: bool = False,
    expandable_segments: bool = False,
    fragmentation: float | None = None,
    step_gradient_copy: bool = False,
    optimizer: OptimizerPrecision = DEFAULT_PRECISION,
    optimizer_offload_fraction: float = 0.0,
    stale_main_grad: bool = False,
) -> np.ndarray:
    """Peak bytes per rank over stages 0, 1 and p-1 (`costmodel.memory` in closed form;
    ``keep_outputs`` as in `costmodel.activations.stage_activations`, the rest as in
    `costmodel.memory.memory_per_stage`)."""
    weight, grad, _ = bytes_per_param(job, main_grad_bytes)
    state = adam_state_per_row(
        c, job, with_offload(optimizer, optimizer_offload_fraction), fp8_weights
    )
    linear_param, linear_cache = fp8_weights.param_bytes(job), fp8_weights.cache_bytes(job)
    linear_shard = fp8_weights.shard_bytes(job)
    # gradient buffers in the backward and at the step (`costmodel.memory.held_gradient_copies`)
    fsdp = c["use_megatron_fsdp"].astype(bool)
    ddp = c["overlap_grad_reduce"].astype(bool) & ~fsdp
    local = (
        ~c["overlap_grad_reduce"].astype(bool) & ~fsdp & ~c["distributed_optimizer"].astype(bool)
    )
    step_copies = np.where(ddp & ddp_gradient_copy, 2, 1)
    grad_copies = np.where(local & stale_main_grad, 2, step_copies)
    frame = FrameworkAllowance()
    share = frame.fragmentation(expandable_segments) if fragmentation is None else fragmentation
    pp, vpp = c["pp"], c["vpp"]
    e = ops.element_bytes(job.precision)
    tokens = c["micro_batch_size"] * job.seq_length / c["cp"]
    scale = c["micro_batch_size"] / c["cp"]
    sp_div = np.where(c["sequence_parallel"], c["tp"], 1)
    boundary = e * tokens * model.hidden_size / sp_div
    extra = np.where(
        c["tp_comm_overlap"],
        4 * e * tokens * model.hidden_size,
        np.where(c["sequence_parallel"], e * tokens * model.hidden_size, 0.0),
    )
    if model.is_moe:
        rows = model.moe_top_k * tokens / sp_div * (model.moe_capacity_factor or 1.0)
        extra = extra + e * rows * model.hidden_size
    distopt = c["distributed_optimizer"].astype(bool)
    dense_shards = np.where(c["optim_sharded"], c["dp"] * c["cp"], 1)
    expert_shards = np.where(c["optim_sharded"], c["edp"], 1)
    padding_unit = np.lcm(c["dp"] * c["cp"], 128) * (weight + grad)
    peak = np.zeros(len(pp))
    for tag, stage in (("0", np.zeros_like(pp)), ("1", c["s1"]), ("l", pp - 1)):
        dense, expert = c[f"p{tag}d"], c[f"p{tag}e"]
        params = dense + expert
        # Megatron-FSDP (`costmodel.runtimes.megatron.megatron_fsdp.fsdp_state_bytes`):
        # sharded weights and gradients keep GATHERED_LAYERS layers whole besides their
        # shard; sharded weights keep the modules outside the units whole
        sharded = dense / (c["dp"] * c["cp"]) + expert / np.maximum(c["edp"], 1)
        non_unit = weight * c[f"p{tag}u"] * (1.0 - 1.0 / (c["dp"] * c["cp"]))
        resident = np.minimum(sharded + GATHERED_LAYERS * c["layer_max"], params)
        linear = c[f"p{tag}l"]  # linear layers' weights at `Fp8WeightStorage` bytes
        whole = weight * (params - linear) + linear_param * linear
        layer = linear_param * c["layer_lin"] + weight * c["layer_other"]
        shard = (weight * (params - linear) + linear_shard * linear) / params * sharded
        gathered = np.minimum(shard + GATHERED_LAYERS * layer + non_unit, whole)
        optimizer_state = state * (dense / dense_shards + expert / expert_shards)
        if is_muon(job):  # the worst rank's whole parameters (costmodel.muon_sharding)
            optimizer_state = np.where(fsdp, optimizer_state, worst_state_bytes(c, tag))
        model_state = (
            np.where(c["params_sharded"], gathered, whole)
            + linear_cache * linear
            + grad
            * np.where(c["grads_sharded"] & c["use_megatron_fsdp"], resident, params * grad_copies)
            + device_optimizer_bytes(optimizer_state, optimizer_offload_fraction)
        )
        first_chunk, total = _in_flight(pp, vpp, m, stage, np.zeros_like(pp))
        last_chunk, _ = _in_flight(pp, vpp, m, stage, vpp - 1)
        per_chunk = (c[f"n{tag}d"] + c[f"n{tag}m"]) / vpp
        layers = total * per_chunk * c["act_layers"] * scale
        acts = layers + c["act_work"] * scale
        acts += np.where(stage == 0, first_chunk * c["act_emb"] * scale, 0.0)
        loss = last_chunk * c["act_out"] + np.where(last_chunk > 0, c["act_out_once"], 0.0)
        acts += np.where(stage == pp - 1, loss * scale, 0.0)
        if keep_outputs:
            sending = total - np.where(stage == pp - 1, last_chunk, 0)
            acts += np.where(pp > 1, sending * boundary, 0.0)
        directions = np.where(pp == 1, 0, np.where(vpp > 1, 2, (stage > 0) + (stage < pp - 1)))
        buckets = np.where(c["overlap_grad_reduce"], np.ceil(params / c["bucket"]), 1)
        comm = directions * boundary + extra + np.where(distopt, buckets * padding_unit, 0.0)
        total_bytes = model_state + acts + comm + frame.fixed_bytes + share * (acts + comm)
        if step_gradient_copy or is_muon(job):
            stepped = dense / dense_shards + expert / expert_shards
            step_state = model_state - (grad_copies - step_copies) * grad * params
            step = step_peak_bytes(
                job,
                step_state,
                stepped,
                main_grad_bytes,
                frame.fixed_bytes,
                gradient_copy=step_gradient_copy,
                working_bytes=worst_working_bytes(c, tag) if is_muon(job) else 0.0,
            )
            total_bytes = np.maximum(total_bytes, step)
        peak = np.maximum(peak, total_bytes)
    return peak


def closed_form_screen(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    df: pd.DataFrame,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> pd.DataFrame:
    """Closed-form time and memory of every normalized plan row (`costmodel.plan_frame`;
    see the module docstring), ``profile`` as the runtime sees it.

    Rows are not checked against `specs.rules` (the planner generates valid plans); a row
    whose batch gives no microbatch, whose layers do not split over pp·vpp, or an
    interleaved row whose microbatches are not a multiple of pp, gets an infinite
    iteration time and ``fits`` False.
    """
    topo = _topology(profile, cluster)
    df = with_sharding(df, layerwise=job.optimizer == "dist_muon")
    m = (job.global_batch_size // (df["micro_batch_size"] * df["dp"])).to_numpy()
    df["bucket"] = df["ddp_bucket_size"].where(
        df["ddp_bucket_size"] > 0, np.maximum(40_000_000, 1_000_000 * df["dp"] * df["cp"])
    )
    parts = [
        *priced_parts(model, job, profile, df, topo, options),
        per_distinct_row(
            df,
            [
                "tp",
                "sequence_parallel",
                "etp",
                "recompute",
                "recompute_num_layers",
                "recompute_method",
                *SAVER_KEY,
            ],
            activation_columns(model, job, options),
        ),
        per_distinct_row(
            df,
            [*SPLIT_COLUMNS, "recompute", "recompute_num_layers", "recompute_method"],
            _recompute_fraction(model),
        ),
    ]
    c = {k: v.to_numpy() for k, v in pd.concat([df, *parts], axis=1).items()}
    c["tied"] = np.full(len(df), model.tied_embeddings)
    c["chunk0"] = (c["p0d"] - c["emb_params"]) / c["vpp"] + c["emb_params"]
    c["nb0"] = np.where(
        c["overlap_grad_reduce"].astype(bool), np.maximum(np.ceil(c["chunk0"] / c["bucket"]), 1), 1
    )
    if is_muon(job):
        c.update(muon_columns(model, job, profile, options, c))
    grad_bytes = ops.element_bytes(job.precision)

    def accumulate(params: np.ndarray) -> np.ndarray:
        if options.grad_accumulation_fusion:
            return np.zeros(len(params))
        per_param = (
            grad_accumulation_time_s(profile, 1e9, grad_bytes, options.main_grad_bytes) / 1e9
        )
        return per_param * params

    *times, compute0 = _stage_times(c, model, c["recompute"], accumulate)
    pipeline = _pipeline_s(c, times, _send_s(c, model, job, options), m, options.overlap_p2p)
    sync = _gradients_s(c, times, pipeline, float(options.main_grad_bytes), m)
    iteration = sync + _tail_s(c, times, profile, job, model, options, np.maximum(m, 1))
    ok = (m >= 1) & ((c["vpp"] == 1) | ((m >= c["pp"]) & (m % c["pp"] == 0)))
    ok &= c["split_ok"].astype(bool)
    ok &= precision_aware_allowed(c, options)
    iteration = np.where(ok, iteration, np.inf)
    peak = np.where(
        ok,
        _memory_bytes(
            c,
            model,
            job,
            np.maximum(m, 1),
            options.main_grad_bytes,
            keep_outputs=not options.deallocate_pipeline_outputs,
            ddp_gradient_copy=options.ddp_gradient_copy,
            expandable_segments=options.expandable_segments,
            fp8_weights=options.fp8_weight_storage,
            fragmentation=options.allocator_fragmentation,
            step_gradient_copy=options.step_gradient_copy,
            optimizer=options.optimizer_precision,
            optimizer_offload_fraction=options.optimizer_cpu_offload_fraction,
            stale_main_grad=options.stale_main_grad,
        ),
        np.inf,
    )
    flops = model_flops_per_iteration(model, job.seq_length, job.global_batch_size)
    peak_flops_s = peak_flops(profile, ops.gemm_dtype(job.precision))
    out = df.drop(columns=["bucket", *SHARDING_COLUMNS])
    out["num_microbatches"] = m
    out["iteration_time_s"] = iteration
    out["compute_s"] = np.where(ok, m * compute0, np.inf)
    out["pipeline_s"] = np.where(ok, pipeline, np.inf)
    out["tokens_per_s"] = job.tokens_per_iteration / iteration
    out["mfu"] = flops / iteration / cluster.num_gpus / peak_flops_s
    out["peak_memory_bytes"] = peak
    out["peak_memory_gib"] = peak / GiB
    out["fits"] = peak <= profile.device.memory_gib * GiB
    return out


def _send_s(
    c: dict[str, np.ndarray], model: ModelSpec, job: TrainingJob, options: ExecutionOptions
) -> np.ndarray:
    """One pipeline send of a microbatch's boundary activation (zero without pipelining);
    a scattered send moves 1/tp of it and all-gathers it over tp."""
    sp_div = np.where(c["sequence_parallel"], c["tp"], 1)
    send_bytes = (
        c["micro_batch_size"]
        * job.seq_length
        / c["cp"]
        * model.hidden_size
        / sp_div
        * ops.element_bytes(job.precision)
    )
    scatter = options.pipeline_scatter_gather & ~c["sequence_parallel"] & (c["tp"] > 1)
    send = c["send_a"] + c["send_b"] * send_bytes / np.where(scatter, c["tp"], 1)
    send += np.where(scatter, affine_s(c["tpag_a"], c["tpag_b"], send_bytes), 0.0)
    return np.where(c["pp"] > 1, send, 0.0)


def pipeline_lower_bound_s(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    df: pd.DataFrame,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> np.ndarray:
    """Per normalized plan row, a lower bound of its `closed_form_screen` iteration time
    under every choice of the knobs that only add time: the pipeline phase of the closed
    form without recompute and with gradient accumulation free.

    Why it bounds: the screened iteration time is the pipeline phase plus the exposed
    gradient synchronization and the tail (optimizer step, parameter gathers), each at
    least zero; recompute and unfused gradient accumulation add to the per-microbatch
    backward, and the pipeline phase never decreases as a stage's per-microbatch time
    grows (Narayanan et al. 2021 §2.2 in `_pipeline_s`). So the bound holds for every
    recompute mode, optimizer sharding, overlap flag and bucket size of the row's degrees,
    split, micro-batch, sequence parallelism, TP communication overlap and CP exchange.
    Rows the schedule cannot run get a finite bound (their screened time is infinite).
    """
    topo = _topology(profile, cluster)
    df = with_sharding(df, layerwise=job.optimizer == "dist_muon")
    m = (job.global_batch_size // (df["micro_batch_size"] * df["dp"])).to_numpy()
    parts = priced_parts(model, job, profile, df, topo, options)
    c = {k: v.to_numpy() for k, v in pd.concat([df, *parts], axis=1).items()}
    no_recompute = np.full(len(df), "none")
    c["rc_frac"] = np.zeros(len(df))
    *times, _ = _stage_times(c, model, no_recompute, lambda params: np.zeros(len(params)))
    send = _send_s(c, model, job, options)
    return _pipeline_s(c, times, send, np.maximum(m, 1), options.overlap_p2p)


def _topology(profile: HardwareProfile, cluster: ClusterSpec) -> tuple[int, int, int]:
    per_node = cluster.gpus_per_node or profile.topology.gpus_per_node
    domain = scale_up_domain_size(profile, cluster.gpus_per_node)
    return per_node, domain, profile.topology.nics_per_node
