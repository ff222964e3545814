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
row (`costmodel.runtimes.megatron.screen_parts`). Everything else is numpy arithmetic over the
rows, one module per phase:

- pipeline (`costmodel.runtimes.megatron.screen_pipeline`, Narayanan et al. 2021 §2.2,
  checked against the simulator): per-stage microbatch times, pipeline sends, and the 1F1B
  and interleaved pipeline phase;
- gradients and tail (`costmodel.runtimes.megatron.screen_tail`): the exposed gradient
  reductions, the optimizer step and the exposed parameter all-gather, as in
  `costmodel.runtimes.megatron.grad_reduction`, `costmodel.runtimes.megatron.optimizer_step`
  and `costmodel.runtimes.megatron.param_gather`;
- memory (`costmodel.runtimes.megatron.screen_memory`): `costmodel.memory` for stage 0,
  stage 1 and the last stage;
- sharding (`costmodel.runtimes.megatron.screen_sharding`): the distributed optimizer's
  and Megatron-FSDP's sharded state and Megatron-FSDP's parameter gathers (per layer and
  pass under `optim_grads_params`, `costmodel.runtimes.megatron.megatron_fsdp`);
- Muon (`muon`, `dist_muon`): the optimizer state and step of the rank with the most state
  and `dist_muon`'s gather after the step, from the simulator's functions once per distinct
  layout (`costmodel.runtimes.megatron.screen_muon`).

Agreement with the simulator is within 5% on uniform dense models, Muon included (tested);
MoE models with leading dense layers and non-default recompute layer counts use layer
averages, and fine-grained activation offloading's one layer kept in flight is averaged over
the layers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from costmodel import compute as ops
from costmodel.bf16_layer_rules import bf16_layer_counts, stage_limit
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.iteration_flops import job_model_flops_per_iteration
from costmodel.memory_allowances import GiB
from costmodel.optimizer_muon import is_muon
from costmodel.plan_frame import SPLIT_COLUMNS, per_distinct_row
from costmodel.rank_params import shared_word_embedding
from costmodel.runtimes.megatron.screen_activations import activation_columns
from costmodel.runtimes.megatron.screen_memory import memory_bytes
from costmodel.runtimes.megatron.screen_muon import muon_columns
from costmodel.runtimes.megatron.screen_parts import SAVER_KEY, priced_parts
from costmodel.runtimes.megatron.screen_pipeline import (
    accumulation_s,
    pipeline_s,
    recompute_fraction,
    send_s,
    stage_times,
)
from costmodel.runtimes.megatron.screen_sharding import (
    SHARDING_COLUMNS,
    precision_aware_allowed,
    with_sharding,
)
from costmodel.runtimes.megatron.screen_tail import gradients_done_s, tail_s
from costmodel.scale_up import RankPacking
from costmodel.topology import ClusterShape, cluster_shape
from profiles.lookup import peak_flops
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec

_RECOMPUTE_KEY = ["recompute", "recompute_num_layers", "recompute_method"]


def _screen_columns(
    model: ModelSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    df: pd.DataFrame,
    topo: ClusterShape,
    options: ExecutionOptions,
) -> dict[str, np.ndarray]:
    """The per-plan columns the phases read: the rows' knobs, the priced parts
    (`screen_parts.priced_parts`), the activation and recompute-fraction columns, chunk 0's
    parameters and gradient buckets, and under Muon the worst rank's columns."""
    parts = [
        *priced_parts(model, job, profile, df, topo, options),
        per_distinct_row(
            df,
            ["tp", "sequence_parallel", "etp", *_RECOMPUTE_KEY, *SAVER_KEY],
            activation_columns(model, job, options),
        ),
        per_distinct_row(df, [*SPLIT_COLUMNS, *_RECOMPUTE_KEY], recompute_fraction(model)),
    ]
    c = {k: v.to_numpy() for k, v in pd.concat([df, *parts], axis=1).items()}
    c["tied"] = np.full(len(df), shared_word_embedding(model))
    c["chunk0"] = (c["p0d"] - c["emb_params"]) / c["vpp"] + c["emb_params"]
    c["nb0"] = np.where(
        c["overlap_grad_reduce"].astype(bool), np.maximum(np.ceil(c["chunk0"] / c["bucket"]), 1), 1
    )
    if is_muon(job):
        c.update(muon_columns(model, job, profile, options, c))
    return c


def _runnable(
    c: dict[str, np.ndarray],
    m: np.ndarray,
    options: ExecutionOptions,
    model: ModelSpec,
    job: TrainingJob,
) -> np.ndarray:
    """Rows with a microbatch, an interleaved count of microbatches that is a multiple of
    pp, a valid pipeline split, an allowed precision-aware optimizer and, in an fp8 job,
    no more bf16 layers at either end than Megatron-core takes per stage
    (`costmodel.bf16_layer_rules.bf16_layer_violations`)."""
    ok = (m >= 1) & ((c["vpp"] == 1) | ((m >= c["pp"]) & (m % c["pp"] == 0)))
    ok &= c["split_ok"].astype(bool)
    ok &= precision_aware_allowed(c, options)
    limit = stage_limit(model, job, c["pp"])
    if limit is not None:
        ok &= max(bf16_layer_counts(options)) <= limit
    return ok


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
    c = _screen_columns(model, job, profile, df, topo, options)
    depth_tags = tuple(kind.tag for kind in model.mtp_depth_kinds())
    first, middle, last, compute0 = stage_times(
        c, c["recompute"], accumulation_s(profile, job, options), depth_tags
    )
    times = (first, middle, last)
    pipeline = pipeline_s(c, times, send_s(c, model, job, options), m, options.overlap_p2p)
    sync = gradients_done_s(c, times, pipeline, float(options.main_grad_bytes), m)
    iteration = sync + tail_s(c, times, profile, job, model, options, np.maximum(m, 1))
    ok = _runnable(c, m, options, model, job)
    iteration = np.where(ok, iteration, np.inf)
    peak = np.where(ok, memory_bytes(c, model, job, np.maximum(m, 1), options), np.inf)
    flops = job_model_flops_per_iteration(model, job)
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
    grows (Narayanan et al. 2021 §2.2 in `screen_pipeline.pipeline_s`). So the bound holds
    for every recompute mode, optimizer sharding, overlap flag and bucket size of the row's
    degrees, split, micro-batch, sequence parallelism, TP communication overlap and CP
    exchange.
    Rows the schedule cannot run get a finite bound (their screened time is infinite).
    """
    topo = _topology(profile, cluster)
    df = with_sharding(df, layerwise=job.optimizer == "dist_muon")
    m = (job.global_batch_size // (df["micro_batch_size"] * df["dp"])).to_numpy()
    parts = priced_parts(model, job, profile, df, topo, options)
    c = {k: v.to_numpy() for k, v in pd.concat([df, *parts], axis=1).items()}
    no_recompute = np.full(len(df), "none")
    c["rc_frac"] = c["mtp_rc"] = np.zeros(len(df))
    first, middle, last, _ = stage_times(c, no_recompute, lambda params: np.zeros(len(params)))
    send = send_s(c, model, job, options)
    return pipeline_s(c, (first, middle, last), send, np.maximum(m, 1), options.overlap_p2p)


def _topology(profile: HardwareProfile, cluster: ClusterSpec) -> ClusterShape:
    """The ranks, servers, domains and NICs the group placements use
    (`costmodel.topology.cluster_shape`: the NVLink segment on NVL72)."""
    return cluster_shape(profile, cluster.num_gpus, RankPacking.of(cluster))
