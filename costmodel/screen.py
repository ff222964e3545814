"""The planner's screen: time and memory of many candidate plans at once.

`screen_plans` normalizes the plan rows (`costmodel.plan_frame`) and hands them to the
runtime's screen: a closed form for ``megatron`` (`costmodel.runtimes.megatron.screen`),
an event simulation of every distinct plan for ``torch``
(`costmodel.runtimes.torch.screen`).
"""

from __future__ import annotations

import pandas as pd

from costmodel.execution import DEFAULT_OPTIONS, ExecutionOptions
from costmodel.plan_frame import normalized_frame
from costmodel.runtimes.registry import runtime_model
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec


def screen_plans(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    plans: pd.DataFrame,
    *,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> pd.DataFrame:
    """``plans`` (one row per plan, `costmodel.plan_frame.PLAN_COLUMNS`) with
    ``num_microbatches``, ``iteration_time_s``, ``compute_s``, ``pipeline_s``,
    ``tokens_per_s``, ``mfu``, ``peak_memory_bytes``, ``peak_memory_gib`` and ``fits``, on
    the runtime ``options`` names. Rows the schedule cannot run get an infinite iteration
    time and ``fits`` False; unknown columns raise `SpecError`."""
    runtime = runtime_model(options)
    rows = normalized_frame(plans, cluster)
    return runtime.screen(model, cluster, job, runtime.priced_profile(profile), rows)
