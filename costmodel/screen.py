"""The planner's screen: time and memory of many candidate plans at once.

`screen_plans` normalizes the plan rows (`costmodel.plan_frame`) and hands them to the
runtime's screen: a closed form for ``megatron`` (`costmodel.runtimes.megatron.screen`),
an event simulation of every distinct plan for ``torch``
(`costmodel.runtimes.torch.screen`). `screen_lower_bounds` bounds the closed form's
iteration time from below over the knobs that only add time, for the planner to skip
candidates that cannot be among its best (``megatron`` only).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS, device_options
from costmodel.plan_frame import normalized_frame
from costmodel.runtimes.megatron.screen import pipeline_lower_bound_s
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
    time and ``fits`` False; unknown columns raise `SpecError`. Fields of ``options`` left
    to the device are resolved for ``profile`` (`costmodel.execution_presets.device_options`)."""
    runtime = runtime_model(device_options(options, profile))
    rows = normalized_frame(plans, cluster)
    return runtime.screen(model, cluster, job, runtime.priced_profile(profile), rows)


def screen_lower_bounds(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    plans: pd.DataFrame,
    *,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> np.ndarray | None:
    """Per row of ``plans``, a lower bound of the ``iteration_time_s`` that `screen_plans`
    gives the row under any recompute mode, optimizer sharding, overlap flag and bucket
    size (`costmodel.runtimes.megatron.screen.pipeline_lower_bound_s`); None for a runtime
    without a closed form (``torch``), whose screen cannot be bounded this way."""
    if options.runtime != "megatron":
        return None
    options = device_options(options, profile)
    runtime = runtime_model(options)
    rows = normalized_frame(plans, cluster)
    return pipeline_lower_bound_s(
        model, cluster, job, runtime.priced_profile(profile), rows, options
    )
