"""What would make a plan that does not fit in memory fit: memory-saving changes of the plan
(full recompute, distributed optimizer or Megatron-FSDP, sequence parallel, a smaller
micro-batch, CPU activation offloading, a wider tp, more pipeline stages on the same or on
more GPUs), each with the peak memory `costmodel.memory` predicts for it
(`fit_suggestions`), and the fewest GPUs the model state alone needs
(`min_gpus_for_model_state`). `planner.explain` prints them for the closest candidates of a
search that found no plan."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from costmodel.memory import peak_memory_bytes
from specs.cluster import ClusterSpec
from specs.formats import gib
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import count_params
from specs.plan import ParallelPlan
from specs.rules import check_plan
from specs.rules_base import divisors

MODEL_STATE_BYTES_PER_PARAM = {"bf16": 18, "fp8": 18, "nvfp4": 17, "fp32": 16}
"""Weights, gradients and optimizer state per parameter over the whole cluster when nothing
is replicated (megatron-facts.md §5.4): a lower bound of the memory a job needs. nvfp4: its
NVFP4 parameters (`costmodel.memory_allowances.NVFP4_WEIGHT_BYTES`, 1.125 bytes, with
Megatron-Bridge's ``fp4_param_gather``) in place of bf16 ones, 17.125, rounded down."""


def min_gpus_for_model_state(model: ModelSpec, job: TrainingJob, limit_bytes: float) -> int:
    """GPUs below which the model state alone cannot fit: bytes/param x params / limit."""
    total = count_params(model).total * MODEL_STATE_BYTES_PER_PARAM[job.precision]
    return max(1, math.ceil(total / limit_bytes))


@dataclass(frozen=True, kw_only=True, slots=True)
class FitSuggestion:
    """One change to a plan that does not fit, with its predicted peak memory."""

    change: str
    """What changes, in spec fields as ``field=value`` (rewritten by
    `paraplan.fix_flags.cli_fix` where the CLI prints it), e.g. ``recompute=full`` or
    ``pp=8 on 256 GPUs``."""
    plan: ParallelPlan
    """The changed plan."""
    num_gpus: int
    """GPUs the changed plan needs."""
    peak_memory_bytes: float
    """`costmodel.memory` peak of the changed plan."""
    fits: bool
    """Within the memory limit."""


def _assignments(plan: ParallelPlan, changed: ParallelPlan, fields: tuple[str, ...]) -> str:
    """``field=value`` of each of ``fields`` whose value ``changed`` sets anew, the first
    always: ``recompute=full``, ``recompute=full recompute_num_layers=1``."""
    texts = [
        f"{field}={getattr(changed, field)}"
        for field in fields
        if field == fields[0] or getattr(plan, field) not in (None, getattr(changed, field))
    ]
    return " ".join(texts)


def _deeper_pipelines(
    plan: ParallelPlan, num_layers: int, gpus: int, limit: int = 3
) -> list[tuple[str, dict[str, object], int]]:
    """More pipeline stages: the next divisors of the layers above pp, each on the same
    GPUs (taking ranks from dp) when dp allows, else on proportionally more GPUs."""
    out: list[tuple[str, dict[str, object], int]] = []
    for pp in [p for p in divisors(num_layers) if p > plan.pp][:limit]:
        change: dict[str, object] = {"pp": pp, "vpp": 1, "schedule": "1f1b"}
        text = f"pp={pp}" + (" vpp=1" if plan.vpp > 1 else "")
        if (plan.dp * plan.pp) % pp == 0:
            out.append((text, change | {"dp": plan.dp * plan.pp // pp}, gpus))
        else:
            more = gpus // plan.pp * pp
            out.append((f"{text} on {more} GPUs", change, more))
    return out


def _wider_context(
    plan: ParallelPlan, gpus: int, limit: int = 3
) -> list[tuple[str, dict[str, object], int]]:
    """More context-parallel ranks: cp doubled up to ``limit`` times on proportionally more
    GPUs, dp kept. Each rank holds seq_length / (tp·cp) tokens of every activation
    (megatron-facts.md §7.1), so at long sequences, where activations dominate and
    recompute has already cut them to a layer's input, cp is the change that shrinks them;
    `check_plan` judges the sequence's divisibility by 2·cp."""
    return [
        (f"cp={plan.cp * 2**k} on {gpus * 2**k} GPUs", {"cp": plan.cp * 2**k}, gpus * 2**k)
        for k in range(1, limit + 1)
    ]


def _variants(
    plan: ParallelPlan, num_layers: int, gpus: int
) -> list[tuple[str, ParallelPlan, int]]:
    """Memory-saving changes of ``plan``: (description, plan, GPUs it needs)."""
    out = []
    if plan.recompute != "full" or plan.recompute_num_layers not in (None, 1):
        full = plan.replace(recompute="full", recompute_num_layers=1, recompute_method="uniform")
        out.append(
            (
                _assignments(plan, full, ("recompute", "recompute_num_layers", "recompute_method")),
                full,
                gpus,
            )
        )
    if not plan.distributed_optimizer:
        out.append(("distributed_optimizer=True", plan.replace(distributed_optimizer=True), gpus))
    if not plan.use_megatron_fsdp and plan.dp * plan.cp > 1:
        fsdp = plan.replace(
            use_megatron_fsdp=True,
            data_parallel_sharding_strategy="optim_grads_params",
            distributed_optimizer=False,
        )
        change = "use_megatron_fsdp=True data_parallel_sharding_strategy=optim_grads_params"
        out.append((f"{change} (Megatron-FSDP, weights sharded too)", fsdp, gpus))
    if plan.tp > 1 and not plan.sequence_parallel:
        out.append(("sequence_parallel=True", plan.replace(sequence_parallel=True), gpus))
    if plan.micro_batch_size > 1:
        out.append(("micro_batch_size=1", plan.replace(micro_batch_size=1), gpus))
    if not plan.offloads_activations:
        if plan.pp == 1 and plan.recompute == "none":
            layers = num_layers // 2
            offload = plan.replace(cpu_offloading_num_layers=layers)
            out.append((f"cpu_offloading_num_layers={layers} (to host memory)", offload, gpus))
        modules = ("core_attn", "attn_proj")
        offload = plan.replace(offload_modules=modules)
        out.append(("offload_modules=core_attn,attn_proj (to host memory)", offload, gpus))
    if plan.dp % 2 == 0:
        wider = plan.replace(tp=plan.tp * 2, dp=plan.dp // 2)
        out.append((f"tp={plan.tp * 2} (may leave the NVLink domain)", wider, gpus))
    savers = {
        "recompute": "full",
        "recompute_num_layers": 1,
        "recompute_method": "uniform",
        "distributed_optimizer": True,
        "sequence_parallel": plan.tp > 1,
        "micro_batch_size": 1,
    }
    for change, deeper, need in _deeper_pipelines(plan, num_layers, gpus) + _wider_context(
        plan, gpus
    ):
        plain, saving = plan.replace(**deeper), plan.replace(**deeper, **savers)
        out.append((change, plain, need))
        if saving != plain:  # the savers this plan lacks, each as field=value
            added = (f"{f}={getattr(saving, f)}" for f in savers if getattr(plain, f) != savers[f])
            out.append((f"{change} {' '.join(added)}", saving, need))
    return out


def fit_suggestions(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan, limit: float
) -> list[FitSuggestion]:
    """Valid memory-saving variants of ``plan``, those that fit first, then by memory."""
    found = []
    for change, variant, gpus in _variants(plan, model.num_layers, cluster.num_gpus):
        bigger = ClusterSpec(
            hardware=cluster.hardware, num_gpus=gpus, gpus_per_node=cluster.gpus_per_node
        )
        if check_plan(model, bigger, job, variant):
            continue
        peak = peak_memory_bytes(model, job, variant)
        found.append(
            FitSuggestion(
                change=change,
                plan=variant,
                num_gpus=gpus,
                peak_memory_bytes=peak,
                fits=peak <= limit,
            )
        )
    fitting = sorted((s for s in found if s.fits), key=lambda s: (s.num_gpus, s.peak_memory_bytes))
    over = sorted((s for s in found if not s.fits), key=lambda s: s.peak_memory_bytes)
    # A change that saves nothing over a simpler one listed before it adds no information.
    distinct: dict[tuple[int, float], FitSuggestion] = {}
    for suggestion in fitting + over:
        distinct.setdefault((suggestion.num_gpus, suggestion.peak_memory_bytes), suggestion)
    return list(distinct.values())


def fit_suggestion_lines(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    limit: float,
    count: int = 4,
    phrase: Callable[[str], str] = str,
) -> list[str]:
    """The first ``count`` `fit_suggestions` of ``plan``, one indented line each:
    ``    - cp=16 on 64 GPUs: 44.0 GiB (fits)``; ``phrase`` rewrites each change
    (`paraplan.fix_flags.cli_fix` in the CLI: ``    - --cp 16 on 64 GPUs: ...``)."""
    return [
        f"    - {phrase(s.change)}: {gib(s.peak_memory_bytes)} "
        f"({'fits' if s.fits else 'still over'})"
        for s in fit_suggestions(model, cluster, job, plan, limit)[:count]
    ]
