"""How tensor parallelism splits a grouped-query attention's key/value heads.

Megatron-core splits the g key/value heads of grouped-query attention over the tp ranks.
With g % tp == 0 each rank holds g / tp of them. Since Megatron-LM commit f7dfb99795
("Support TP greater than num_kv_heads by supporting QKV activation sub-sharding",
2025-12) it also accepts tp % g == 0 (`TransformerConfig.__post_init__`: g "must be a
multiple or divisor of tensor_model_parallel_size"). There, `SelfAttention` keeps the fused
QKV weight split evenly over the ranks, all-gathers the QKV GEMM's output over the tp
group (`all_gather_last_dim_from_tensor_parallel_region`), and each rank keeps the slice
of its one key/value head and its a / tp query heads (`megatron/core/transformer/
attention.py`, `get_query_key_value_tensors`).

- `kv_heads_fit_tp`: the accepted (g, tp) pairs.
- `kv_sub_sharded`: whether a model at a tp degree runs that all-gather path.
- `executor_kv_refusal`: paraplan's executor, the torch runtime that prices it, and the
  torchtitan export split each K/V projection column-wise over tp, which needs g % tp == 0.
"""

from __future__ import annotations

from typing import Protocol

EXECUTOR_KV_RULE = "kv_heads_divisible_by_tp_outside_megatron"
"""Rule id of `executor_kv_refusal`."""


class KvFields(Protocol):
    """What the checks read of a `specs.model.ModelSpec`."""

    @property
    def name(self) -> str: ...

    @property
    def query_groups(self) -> int: ...

    @property
    def uses_mla(self) -> bool: ...


def kv_heads_fit_tp(groups: int, tp: int) -> bool:
    """g % tp == 0 (g / tp key/value heads per rank) or tp % g == 0 (QKV activation
    sub-sharding: one key/value head per rank, module docstring)."""
    return groups % tp == 0 or tp % groups == 0


def kv_sub_sharded(model: KvFields, tp: int) -> bool:
    """Whether ``model`` at tensor-parallel size ``tp`` runs Megatron-core's QKV
    activation sub-sharding: grouped-query attention (not MLA) with fewer key/value heads
    than tp ranks."""
    return not model.uses_mla and model.query_groups < tp


def executor_kv_refusal(model: KvFields, tp: int, runner: str) -> str | None:
    """Why ``runner`` (paraplan's executor, the torch runtime, torchtitan) cannot run
    ``model`` at ``tp``, or None: it splits each key/value projection column-wise over tp,
    so g must be a multiple of tp; only Megatron-LM sub-shards the QKV activations."""
    if not kv_sub_sharded(model, tp):
        return None
    return (
        f"[{EXECUTOR_KV_RULE}] model {model.name!r} has {model.query_groups} key/value heads "
        f"and the plan's tp is {tp}: {runner} splits the key/value projections over tp, which "
        f"needs num_query_groups to be a multiple of tp; only Megatron-LM sub-shards the QKV "
        f"activations (tp a multiple of the key/value heads): use tp <= {model.query_groups} "
        "or run the plan with Megatron-LM (--runtime megatron, export --to megatron)"
    )
