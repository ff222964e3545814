"""The DeepSpeed ZeRO-3 rows (SC21 Table 2, "ZeRO-3 without Model Parallelism"): their
sharding, execution options and recompute setting.

Narayanan et al. 2021 (SC21, arXiv 2104.04473, Table 2) ran GPT 175B and 530B under
DeepSpeed's stage-3 engine with tp = pp = 1 and DP = GPUs. Such a row is priced as that
engine runs it: weights, gradients and optimizer state sharded over the data-parallel group
(`zero3_plan_fields`: the ``optim_grads_params`` sharding Megatron-FSDP also prices) with
the execution options `costmodel.execution_presets.DEEPSPEED_ZERO3_2021` (the 2021 model
code, DeepSpeed's gather schedule: `costmodel.runtimes.megatron.zero3_schedule`).

The rows state no recompute. The 2021 code had two settings: none, and full recompute of
whole layers (``--checkpoint-activations``; selective recompute came with Korthikanti et
al. 2022, arXiv 2205.05198, and is not among `MEGATRON_2021`'s plan features).
`zero3_recompute` takes the first of `RECOMPUTE_2021` under which the row fits its device
(the memory model alone, not the published figure), and says which and why
(`Zero3Recompute.reason`); when neither fits the row is refused with both peaks.

A priced ZeRO-3 row is reported apart (`priced_apart_reason`, `zero3_apart`): in no summary, no
Kendall group and no figure of the bench, with the engine costs the model leaves out
(`UNPRICED_ENGINE_COSTS`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from recipe_keys import NotExpressible
from row_columns import column_text

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEEPSPEED_ZERO3_2021, device_options
from costmodel.runtimes.registry import runtime_model
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

GiB = 2**30

RECOMPUTE_2021 = ("none", "full")
"""Recompute settings of Megatron-LM in 2021 (`costmodel.execution_presets.MEGATRON_2021`:
``--checkpoint-activations`` or nothing), in the order `zero3_recompute` tries them: the
framework's default first."""


def is_zero3(raw: dict[str, str]) -> bool:
    """Whether the row's ``fsdp_or_zero`` names DeepSpeed's ZeRO stage 3."""
    return "zero-3" in column_text(raw, "fsdp_or_zero").lower()


def zero3_plan_fields(raw: dict[str, str]) -> dict[str, object] | None:
    """Plan fields of a ZeRO-3 row (`is_zero3`): weights, gradients and optimizer state
    sharded over the data-parallel group (``optim_grads_params``; Rajbhandari et al. 2020,
    arXiv 1910.02054, §5.3), no distributed optimizer; None for other rows."""
    if not is_zero3(raw):
        return None
    return {
        "use_megatron_fsdp": True,
        "data_parallel_sharding_strategy": "optim_grads_params",
        "distributed_optimizer": False,
    }


def zero3_options(raw: dict[str, str]) -> ExecutionOptions | None:
    """`DEEPSPEED_ZERO3_2021` for a ZeRO-3 row, None for other rows."""
    return DEEPSPEED_ZERO3_2021 if is_zero3(raw) else None


@dataclass(frozen=True, kw_only=True, slots=True)
class Zero3Recompute:
    """The recompute setting a ZeRO-3 row is priced with, and the peaks that chose it."""

    recompute: str
    """``none`` or ``full`` (`RECOMPUTE_2021`)."""
    peak_gib: dict[str, float]
    """Predicted peak memory of one rank under each setting tried, GiB."""
    device_gib: float
    """The device's memory, GiB."""

    @property
    def reason(self) -> str:
        """What the bench states beside the row: the setting chosen and the peaks."""
        tried = ", ".join(f"{k} {v:.0f} GiB" for k, v in self.peak_gib.items())
        return (
            f"recompute not stated: priced with {self.recompute} recompute, the first setting "
            f"of 2021 code (none, full; no selective recompute then) that fits "
            f"{self.device_gib:.0f} GiB ({tried})"
        )


def plan_peak_gib(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    options: ExecutionOptions,
    profile: HardwareProfile,
) -> float:
    """Predicted peak memory of the plan's fullest rank (the runtime's memory model), GiB."""
    runtime = runtime_model(device_options(options, profile))
    return max(s.total_bytes for s in runtime.memory(model, job, plan)) / GiB


def zero3_recompute(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    options: ExecutionOptions,
    profile: HardwareProfile,
) -> Zero3Recompute:
    """The first setting of `RECOMPUTE_2021` under which ``plan`` fits ``profile``'s device
    (`plan_peak_gib`); NotExpressible with every peak when none fits."""
    device_gib = profile.device.memory_gib
    peaks: dict[str, float] = {}
    for setting in RECOMPUTE_2021:
        trial = dataclasses.replace(plan, recompute=setting)
        peaks[setting] = plan_peak_gib(model, job, trial, options, profile)
        if peaks[setting] <= device_gib:
            return Zero3Recompute(recompute=setting, peak_gib=peaks, device_gib=device_gib)
    tried = ", ".join(f"{k} {v:.0f} GiB" for k, v in peaks.items())
    raise NotExpressible(
        f"ZeRO-3 row with recompute not stated: no setting of 2021 code fits "
        f"{device_gib:.0f} GiB ({tried})"
    )


APART_TITLE = "DeepSpeed ZeRO-3 (2021 engine), priced apart"
"""The heading of the validation page's section on these rows (`zero3_apart.zero3_apart_lines`)."""

ENGINE_SOURCE = "microsoft/DeepSpeed v0.3.16"
"""The engine release whose code `UNPRICED_ENGINE_COSTS` cites (SC21's DeepSpeed of 2021)."""

UNPRICED_ENGINE_COSTS = (
    "a stream and device synchronization after each submodule fetch that has parameters to "
    "gather or in flight (deepspeed/runtime/zero/stage3.py, "
    "PartitionedParameterCoordinator.fetch_sub_module and _synchronize_communication: "
    "self.comm_stream.synchronize(), torch.cuda.synchronize())",
    "a device synchronization before each parameter's all-gather and a torch.zeros of the "
    "whole parameter as its gather buffer (deepspeed/runtime/zero/partition_parameters.py, "
    "Init._allgather_param)",
    "the norm of every gathered parameter, a pass over it and a device-to-host read, "
    "evaluated to format a message print_rank_0 does not print (force=False) "
    "(stage3.py, PartitionedParameterCoordinator.fetch_sub_module)",
    "Python hooks on every submodule (stage3.py, FP16_DeepSpeedZeroOptimizer_Stage3."
    "_register_hooks_recursively: forward pre- and post-hooks, backward pre- and "
    "post-functions) and on every parameter's gradient accumulator "
    "(create_reduce_and_remove_grad_hooks: reduce_partition_and_remove_grads)",
)
"""Costs of DeepSpeed's 2021 stage-3 engine that `costmodel.runtimes.megatron.zero3_schedule`
does not price, each with its source in `ENGINE_SOURCE` (file and function)."""

APART_REASON = (
    "DeepSpeed's 2021 stage-3 engine: its published times stay flat in the GPU count at a "
    "fixed global batch, a per-GPU cost of the engine (synchronizations and per-parameter "
    "host work) the cost model does not price; priced, in no figure and no Kendall group"
)
"""Why a ZeRO-3 row is priced apart (`priced_apart_reason`)."""


def priced_apart_reason(raw: dict[str, str]) -> str:
    """`APART_REASON` for a ZeRO-3 row (`is_zero3`), empty for other rows."""
    return APART_REASON if is_zero3(raw) else ""
