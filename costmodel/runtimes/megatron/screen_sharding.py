"""Megatron-FSDP and distributed-optimizer sharding in the closed-form screen
(`costmodel.runtimes.megatron.screen`): which plan rows shard what, and the exposed
parameter gathers of Megatron-FSDP, the optimizer step and Adam's state per sharding (the
precision-aware optimizer's rule and its Megatron-FSDP main weights), over the screen's
per-plan columns (numpy arrays).
The per-plan semantics are `costmodel.runtimes.megatron.megatron_fsdp`'s."""

from __future__ import annotations

import numpy as np
import pandas as pd

from costmodel.execution import ExecutionOptions
from costmodel.execution_derived import fp8_weight_storage, optimizer_precision
from costmodel.memory_allowances import Fp8WeightStorage
from costmodel.model_state import trained_weights
from costmodel.optimizer_passes import optimizer_step_time_s
from costmodel.optimizer_state import OptimizerPrecision, adam_state_bytes, precision_aware_unmet
from costmodel.runtimes.megatron.screen_parts import affine_s
from profiles.schema import HardwareProfile
from specs.job import TrainingJob


def _stage_layers(c, tag: str) -> np.ndarray:
    """Unit modules (transformer and MTP layers, at least 1) of the screen's stage ``tag``:
    ``n{tag}``, which counts the MTP weight sets' layers already
    (`costmodel.rank_params.stage_weight_layers`)."""
    return np.maximum(c[f"n{tag}"], 1)


def fsdp_reduce_per_microbatch_s(c, tag: str, grad_bytes: float) -> np.ndarray:
    """Seconds of one microbatch's gradient reduce-scatters on the screen's stage ``tag``
    (``0``, ``1``, ``l``) where Megatron-FSDP reduces in every backward
    (`costmodel.runtimes.megatron.megatron_fsdp.grads_reduced_every_backward`): one
    reduce-scatter per layer, of the layer's share of the stage's dense and expert
    parameters (``grad_bytes`` each); zero for the other rows."""
    layers = _stage_layers(c, tag)
    dense = layers * affine_s(c["g_a"], c["g_b"], c[f"p{tag}d"] * grad_bytes / layers)
    expert = layers * affine_s(c["ge_a"], c["ge_b"], c[f"p{tag}e"] * grad_bytes / layers)
    every = c["use_megatron_fsdp"].astype(bool) & c["grads_sharded"].astype(bool)
    return np.where(every, dense + expert, 0.0)


def fsdp_reduce_exposed_s(
    c, tag: str, reduce_s: np.ndarray, stage_times, m: np.ndarray
) -> np.ndarray:
    """How long after its last backward the stage ``tag``'s per-backward reduce-scatters
    (``reduce_s`` per microbatch, `fsdp_reduce_per_microbatch_s`) still run: the last
    layer's, the part of the last microbatch's that its backward (``stage_times``'s) could
    not hide, or the backlog of every microbatch's beyond the forward and backward time
    they run under, whichever is longest (the simulator's queue of per-layer reductions,
    `costmodel.runtimes.megatron.grad_reduction`)."""
    forward, backward = stage_times
    layers = _stage_layers(c, tag)
    last = reduce_s / layers
    within = reduce_s - backward * (layers - 1) / layers
    backlog = m * reduce_s - (m * backward + (m - 1) * forward)
    return np.maximum(np.maximum(last, within), backlog)


def closed_form_fsdp_gather_s(
    c,
    tag: str,
    chunk_gather_s: np.ndarray,
    stage_times,
    m: np.ndarray,
    reduce_s: np.ndarray | float = 0.0,
) -> np.ndarray:
    """Megatron-FSDP's exposed parameter gathers of a stage in the closed-form screen
    (`costmodel.runtimes.megatron.screen`, whose per-plan columns ``c`` are): under
    `optim_grads_params` the per-layer gathers of each forward and backward pass (2·m·v
    passes of ``chunk_gather_s`` each; `costmodel.runtimes.megatron.megatron_fsdp.
    fsdp_param_gather_exposed_s` in closed form, each chunk of stage ``tag`` gathering its
    share of the stage's unit modules one at a time, `_stage_layers`), hidden behind the
    passes' compute less the stage's per-backward gradient reduce-scatters (``reduce_s``
    per microbatch, which share the group's links); under `optim` and `optim_grads` one
    gather of every chunk after the step; zero without Megatron-FSDP."""
    v = c["vpp"]
    forward, backward = stage_times
    passes = 2 * m * v
    per_layer = chunk_gather_s / np.maximum(_stage_layers(c, tag) // v, 1)
    first_layers = passes * per_layer
    hidden = np.maximum(m * (forward + backward - reduce_s), 0.0)
    excess = np.maximum(passes * chunk_gather_s - first_layers - hidden, 0.0)
    per_pass = np.where(chunk_gather_s > 0, first_layers + excess, 0.0)
    after_step = np.where(c["optim_sharded"], v * chunk_gather_s, 0.0)
    strategy = np.where(c["params_sharded"], per_pass, after_step)
    return np.where(c["use_megatron_fsdp"].astype(bool), strategy, 0.0)


SHARDING_COLUMNS = ["optim_sharded", "grads_sharded", "params_sharded"]
"""Columns `with_sharding` adds to a plan frame."""


def with_sharding(df: pd.DataFrame, layerwise: bool = False) -> pd.DataFrame:
    """``df`` with what each row shards over data parallelism: the optimizer (distributed
    optimizer, Megatron-FSDP other than no_shard, or with ``layerwise`` the job's
    ``dist_muon``, `costmodel.optimizer_muon.muon_shards`, in column ``layerwise_sharded``),
    gradients (reduce-scattered: the distributed optimizer, or
    `optim_grads`/`optim_grads_params`) and weights (`optim_grads_params`);
    `costmodel.runtimes.megatron.megatron_fsdp.optimizer_sharded` and
    `grads_reduce_scattered` per row."""
    fsdp = df["use_megatron_fsdp"].astype(bool)
    strategy = df["data_parallel_sharding_strategy"]
    distopt = df["distributed_optimizer"].astype(bool)
    by_layer = layerwise & ~distopt & ~fsdp
    return df.assign(
        layerwise_sharded=by_layer,
        optim_sharded=distopt | (fsdp & (strategy != "no_shard")) | by_layer,
        grads_sharded=distopt | (fsdp & strategy.isin(["optim_grads", "optim_grads_params"])),
        params_sharded=fsdp & (strategy == "optim_grads_params"),
    )


def precision_aware_allowed(c, options: ExecutionOptions) -> np.ndarray:
    """Per row, whether Megatron-core runs the options' precision-aware optimizer with the
    row's sharding (`costmodel.optimizer_state.precision_aware_unmet`); a row where it
    does not gets an infinite time and does not fit."""
    distopt = c["distributed_optimizer"].astype(bool)
    fsdp = c["use_megatron_fsdp"].astype(bool)
    allowed = {
        (d, f): precision_aware_unmet(
            optimizer_precision(options), distributed_optimizer=d, megatron_fsdp=f
        )
        is None
        for d in (False, True)
        for f in (False, True)
    }
    return np.select(
        [distopt & fsdp, distopt & ~fsdp, ~distopt & fsdp],
        [allowed[True, True], allowed[True, False], allowed[False, True]],
        default=allowed[False, False],
    )


def optimizer_units(
    profile: HardwareProfile, job: TrainingJob, options: ExecutionOptions, megatron_fsdp: bool
) -> tuple[float, float, float, float]:
    """`costmodel.optimizer_passes.optimizer_step_time_s` as an affine form (seconds per shard
    parameter, per local parameter, per tensor beyond the first, and for one tensor) with
    the options' Adam state (`costmodel.optimizer_state.adam_state_bytes`) for plans
    without or with Megatron-FSDP; the device's part only under optimizer CPU offload
    (`ExecutionOptions.optimizer_cpu_offload_fraction` of the shard off the device)."""
    weights = trained_weights(job, fp8_weight_storage(options))
    state = adam_state_bytes(
        job.precision,
        optimizer_precision(options),
        fp8_recipe=weights.recipe,
        fp8_param=weights.fp8_param,
        fp4_param=weights.fp4_param,
        megatron_fsdp=megatron_fsdp,
    )
    unit = [
        optimizer_step_time_s(
            profile,
            shard_params=s,
            local_params=lp,
            mixed_precision=job.precision != "fp32",
            num_tensors=n,
            loss_scaling=options.loss_scaling,
            main_grad_bytes=options.main_grad_bytes,
            state=state,
            offloaded_params=options.optimizer_cpu_offload_fraction * s,
        )
        for s, lp, n in ((1e9, 0, 1), (0, 1e9, 1), (0, 0, 1), (0, 0, 2))
    ]
    return (unit[0] - unit[2]) / 1e9, (unit[1] - unit[2]) / 1e9, unit[3] - unit[2], unit[2]


def adam_state_per_row(
    c, job: TrainingJob, optimizer: OptimizerPrecision, fp8_weights: Fp8WeightStorage
) -> np.ndarray:
    """Adam's state bytes per parameter of every row (`costmodel.model_state.plan_adam_state`
    without the rule, which `precision_aware_allowed` applies): Megatron-FSDP rows keep its
    fp32 main-weight buffer; a LoRA job's adapters are 16-bit parameters
    (`costmodel.model_state.trained_weights`)."""
    weights = trained_weights(job, fp8_weights)
    by_fsdp = [
        adam_state_bytes(
            job.precision,
            optimizer,
            fp8_recipe=weights.recipe,
            fp8_param=weights.fp8_param,
            fp4_param=weights.fp4_param,
            megatron_fsdp=under_fsdp,
        ).total_bytes
        for under_fsdp in (False, True)
    ]
    return np.where(c["use_megatron_fsdp"].astype(bool), by_fsdp[1], by_fsdp[0])
