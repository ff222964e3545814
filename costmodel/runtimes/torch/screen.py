"""The screen (`costmodel.screen.screen_plans`) of the ``torch`` runtime.

The executor runs worlds of a handful of ranks, so its search spaces hold tens of plans,
and its event simulation of a small model takes milliseconds: the screen runs the event
loop (`costmodel.iteration`) on every distinct plan instead of a closed form, which makes
it agree with `costmodel.estimate` exactly. Rows that give no microbatch, whose layers do not
split over pp·vpp, or that interleave with a microbatch count that is not a multiple of
pp get an infinite iteration time and ``fits`` False, as in the closed-form screen. Memory
comes first: a plan whose peak exceeds the device's memory is not simulated (its time is
infinite, its peak the priced one), since the search can never pick it; a search space of a
large GPU cluster holds tens of thousands of plans, most of them over memory.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from costmodel.iteration import simulate_iteration
from costmodel.iteration_flops import model_flops_per_iteration
from costmodel.memory_allowances import GiB
from costmodel.plan_frame import row_plan
from costmodel.runtime import RuntimeModel
from costmodel.scale_up import RankPacking
from profiles.lookup import peak_flops
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan


def _feasible(model: ModelSpec, plan: ParallelPlan, m: int) -> bool:
    if m < 1 or model.num_layers % (plan.pp * plan.vpp):
        return False
    return plan.vpp == 1 or (m >= plan.pp and m % plan.pp == 0)


def simulated_screen(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    df: pd.DataFrame,
    runtime: RuntimeModel,
) -> pd.DataFrame:
    """``df`` (normalized plan rows) with the screen's metric columns, each row simulated."""
    cache: dict[ParallelPlan, tuple[float, float, float, float]] = {}
    rows = []
    for _, row in df.iterrows():
        plan = row_plan(row)
        if plan not in cache:
            cache[plan] = _simulate(model, cluster, job, profile, plan, runtime)
        rows.append(cache[plan])
    values = np.array(rows, dtype=float).reshape(len(rows), 4)
    iteration, compute, pipeline, peak = values.T
    flops = model_flops_per_iteration(model, job.seq_length, job.global_batch_size)
    peak_flops_s = peak_flops(profile, runtime.executed_job(job, profile).precision)
    out = df.copy()
    out["num_microbatches"] = (
        job.global_batch_size // (df["micro_batch_size"] * df["dp"])
    ).to_numpy()
    out["iteration_time_s"] = iteration
    out["compute_s"] = compute
    out["pipeline_s"] = pipeline
    out["tokens_per_s"] = job.tokens_per_iteration / iteration
    out["mfu"] = flops / iteration / cluster.num_gpus / peak_flops_s
    out["peak_memory_bytes"] = peak
    out["peak_memory_gib"] = peak / GiB
    out["fits"] = peak <= profile.device.memory_gib * GiB
    return out


def _simulate(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    plan: ParallelPlan,
    runtime: RuntimeModel,
) -> tuple[float, float, float, float]:
    """(iteration, compute, pipeline end, peak memory) of one plan: all inf when the
    schedule cannot run it, the times inf when it does not fit in the device's memory."""
    m = plan.num_microbatches(job.global_batch_size)
    if not _feasible(model, plan, m):
        return (np.inf, np.inf, np.inf, np.inf)
    peak = max(s.total_bytes for s in runtime.memory(model, job, plan))
    if peak > profile.device.memory_gib * GiB:
        return (np.inf, np.inf, np.inf, peak)
    sim = simulate_iteration(
        model,
        job,
        plan,
        profile,
        runtime=runtime,
        packing=RankPacking.of(cluster),
    )
    b = sim.breakdown
    compute = b.compute_forward_s + b.compute_backward_s + b.compute_recompute_s
    pipeline = max(t.pipeline_end_s for t in sim.tails)
    return (sim.iteration_time_s, compute, pipeline, peak)
