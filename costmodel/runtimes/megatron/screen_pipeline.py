"""Pipeline time columns of the closed-form screen (`costmodel.runtimes.megatron.screen`).

Over the screen's per-plan columns ``c`` (numpy arrays, one entry per plan row; the
per-layer, per-stage and group columns of `costmodel.runtimes.megatron.screen_parts`),
in seconds:

- per-microbatch forward and backward (recompute included) of stage 0, the fullest middle
  stage and the last stage, with the embedding, the output layer and loss, the MTP
  layers and unfused gradient accumulation where they run (`stage_times`);
- one pipeline send of a microbatch's boundary activation (`send_s`); a scattered send
  (`ExecutionOptions.pipeline_scatter_gather`) moves 1/tp of the tensor and all-gathers
  it over tp;
- the pipeline phase (`pipeline_s`, Narayanan et al. 2021 §2.2, checked against the
  simulator): with per-stage microbatch times T_s (forward + backward + recompute, plus
  the blocking sends of its chunks under 1F1B or without `ExecutionOptions.overlap_p2p`),
  1F1B takes (m - 1)·max T_s + Σ T_s; interleaved takes m·max T_s + (Σ T_s - max T_s)/v
  plus, with asynchronous sends, 2·(p·v - 1) send delays (the first microbatch's forward
  through every virtual stage and the last one's backward).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from costmodel import compute as ops
from costmodel.activations import recomputed_layers
from costmodel.bf16_layers import PRICED_TAGS
from costmodel.execution import ExecutionOptions
from costmodel.optimizer_passes import grad_accumulation_time_s
from costmodel.plan_frame import row_plan
from costmodel.runtimes.megatron.screen_parts import affine_s
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.pipeline_split_checks import split_problem

StagePair = tuple[np.ndarray, np.ndarray]
"""One stage's per-microbatch (forward, backward) seconds per plan row."""
StageTimes = tuple[StagePair, StagePair, StagePair]
"""The `StagePair` of stage 0, the middle stage and the last stage, in that order
(`stage_times`)."""


def recompute_fraction(model: ModelSpec) -> Callable[[Mapping[str, Any]], dict[str, float]]:
    """Per distinct plan row (`costmodel.plan_frame.per_distinct_row`), ``rc_frac``: the
    share of a stage's decoder-layer forward that the backward reruns, 1 under selective
    recompute (whose rerun is priced per layer), the recomputed layers over all layers
    under full recompute (`costmodel.activations.recomputed_layers`), 0 without; and
    ``mtp_rc``: 1 where full recompute reruns each MTP depth's checkpoint, its layers and
    ``eh_proj`` (`specs.plan.ParallelPlan.checkpoints_mtp_depths`), else 0."""

    def fn(row: Mapping[str, Any]) -> dict[str, float]:
        plan = row_plan(row)
        mtp_rc = 1.0 if plan.checkpoints_mtp_depths else 0.0
        if plan.recompute != "full":
            return {"rc_frac": 1.0 if plan.recompute == "selective" else 0.0, "mtp_rc": mtp_rc}
        if split_problem(model, plan) is not None:  # marked invalid by screen_plans
            return {"rc_frac": 1.0, "mtp_rc": mtp_rc}
        return {"rc_frac": len(recomputed_layers(model, plan)) / model.num_layers, "mtp_rc": mtp_rc}

    return fn


def accumulation_s(
    profile: HardwareProfile, job: TrainingJob, options: ExecutionOptions
) -> Callable[[np.ndarray], np.ndarray]:
    """Seconds of unfused gradient accumulation of a number of parameters per row, per
    microbatch (`costmodel.optimizer_passes.grad_accumulation_time_s`, linear in the
    parameters); zero with `ExecutionOptions.grad_accumulation_fusion`."""
    grad_bytes = ops.element_bytes(job.precision)

    def accumulate(params: np.ndarray) -> np.ndarray:
        if options.grad_accumulation_fusion:
            return np.zeros(len(params))
        per_param = (
            grad_accumulation_time_s(profile, 1e9, grad_bytes, options.main_grad_bytes) / 1e9
        )
        return per_param * params

    return accumulate


def stage_times(
    c: dict[str, np.ndarray],
    recompute: np.ndarray,
    accumulate: Callable[[np.ndarray], np.ndarray],
    depth_tags: tuple[str, ...] = (),
) -> tuple[StagePair, StagePair, StagePair, np.ndarray]:
    """Per-microbatch (forward, backward incl. recompute) seconds of stages 0, middle and
    last, then stage 0's compute seconds (its GEMM and kernel time, communication left
    out) per microbatch.

    ``accumulate(params)`` is the unfused gradient-accumulation time of that many
    parameters (`accumulation_s`); ``depth_tags``: the kind tags of one MTP depth's layers
    (`ModelSpec.mtp_depth_kinds`), whose rerun under full recompute follows ``mtp_rc``,
    the decoder layers' ``rc_frac`` (`recompute_fraction`)."""

    def per_stage(tag: str, name: str) -> np.ndarray:
        kinds = [k for k in PRICED_TAGS if f"n{tag}{k}" in c]
        return sum(c[f"n{tag}{k}"] * c[f"{name}_{k}"] for k in kinds)

    def full_redo(tag: str, name: str, depth: str) -> np.ndarray:
        """Full recompute's rerun: the recomputed decoder layers' share of the stage's
        layer forward, and each checkpointed MTP depth's layers and projection part
        (pricing.chunk_costs)."""
        mtp = c[f"mtp{tag}"]
        depth_layers = mtp * sum((c[f"{name}_{k}"] for k in depth_tags), np.zeros(len(mtp)))
        decoder = per_stage(tag, name) - depth_layers
        return c["rc_frac"] * decoder + c["mtp_rc"] * (depth_layers + mtp * c[depth])

    def stage(tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # each MTP depth has its embedding and eh_proj work and its own output layer and loss
        full = recompute == "full"
        redo = np.where(recompute == "selective", per_stage(tag, "r"), 0.0)
        redo = np.where(full, full_redo(tag, "f", "depth_r"), redo)
        redo_c = np.where(recompute == "selective", per_stage(tag, "rc"), 0.0)
        redo_c = np.where(full, full_redo(tag, "fc", "depth_rc"), redo_c)
        mtp = c[f"mtp{tag}"]
        f = per_stage(tag, "f") + mtp * (c["log_f"] + c["depth_f"])
        b = per_stage(tag, "b") + redo + mtp * (c["log_b"] + c["depth_b"])
        depth_c = mtp * (c["log_c"] + c["depth_c"])
        compute = per_stage(tag, "fc") + per_stage(tag, "bc") + redo_c + depth_c
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


def send_s(
    c: dict[str, np.ndarray], model: ModelSpec, job: TrainingJob, options: ExecutionOptions
) -> np.ndarray:
    """One pipeline send of a microbatch's boundary activation, seconds (zero without
    pipelining); a scattered send moves 1/tp of it and all-gathers it over tp
    (`costmodel.runtimes.megatron.pricing.pipeline_send_s` in closed form)."""
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


def pipeline_s(
    c: dict[str, np.ndarray], times: StageTimes, send: np.ndarray, m: np.ndarray, overlap_p2p: bool
) -> np.ndarray:
    """The pipeline phase of an iteration, seconds: ``m`` microbatches through the stages
    at their per-microbatch ``times`` (`stage_times`) with sends of ``send`` seconds
    (see the module docstring; Narayanan et al. 2021 §2.2). Never decreases as a stage's
    per-microbatch time grows."""
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
