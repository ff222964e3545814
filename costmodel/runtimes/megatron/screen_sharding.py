"""Megatron-FSDP and distributed-optimizer sharding in the closed-form screen
(`costmodel.runtimes.megatron.screen`): which plan rows shard what, and the exposed
parameter gathers of Megatron-FSDP, over the screen's per-plan columns (numpy arrays).
The per-plan semantics are `costmodel.runtimes.megatron.megatron_fsdp`'s."""

from __future__ import annotations

import numpy as np
import pandas as pd


def closed_form_fsdp_gather_s(
    c, chunk_gather_s: np.ndarray, stage_times, m: np.ndarray, num_layers: int
) -> np.ndarray:
    """Megatron-FSDP's exposed parameter gathers of a stage in the closed-form screen
    (`costmodel.runtimes.megatron.screen`, whose per-plan columns ``c`` are): under
    `optim_grads_params` the per-layer gathers of each forward and backward pass (2·m·v
    passes of ``chunk_gather_s`` each; `costmodel.runtimes.megatron.megatron_fsdp.
    fsdp_param_gather_exposed_s` in closed form),
    under `optim` and `optim_grads` one gather of every chunk after the step; zero
    without Megatron-FSDP."""
    v = c["vpp"]
    forward, backward = stage_times
    passes = 2 * m * v
    per_layer = chunk_gather_s / np.maximum(num_layers // (c["pp"] * v), 1)
    first_layers = passes * per_layer
    excess = np.maximum(passes * chunk_gather_s - first_layers - m * (forward + backward), 0.0)
    per_pass = np.where(chunk_gather_s > 0, first_layers + excess, 0.0)
    after_step = np.where(c["optim_sharded"], v * chunk_gather_s, 0.0)
    strategy = np.where(c["params_sharded"], per_pass, after_step)
    return np.where(c["use_megatron_fsdp"].astype(bool), strategy, 0.0)


SHARDING_COLUMNS = ["optim_sharded", "grads_sharded", "params_sharded"]
"""Columns `with_sharding` adds to a plan frame."""


def with_sharding(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with what each row shards over data parallelism: the optimizer (distributed
    optimizer, or Megatron-FSDP other than no_shard), gradients (reduce-scattered: the
    distributed optimizer, or `optim_grads`/`optim_grads_params`) and weights
    (`optim_grads_params`); `costmodel.runtimes.megatron.megatron_fsdp.optimizer_sharded` and
    `grads_reduce_scattered` per row."""
    fsdp = df["use_megatron_fsdp"].astype(bool)
    strategy = df["data_parallel_sharding_strategy"]
    distopt = df["distributed_optimizer"].astype(bool)
    return df.assign(
        optim_sharded=distopt | (fsdp & (strategy != "no_shard")),
        grads_sharded=distopt | (fsdp & strategy.isin(["optim_grads", "optim_grads_params"])),
        params_sharded=fsdp & (strategy == "optim_grads_params"),
    )
