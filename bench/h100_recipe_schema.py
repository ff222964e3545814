"""The record of one Megatron-Bridge H100 pretraining recipe (`H100Recipe`), the
releases the recipes cite (`RELEASE_TAGS`), and the citation paths and settings shared by
the dense table (`h100_recipe_dense`) and the MoE table (`h100_recipe_moe`); the tables
together are `h100_recipe_table.RECIPES`."""

from __future__ import annotations

from dataclasses import dataclass, field

RELEASE_TAGS = {
    "25.09": "v0.1.0rc4",
    "25.11": "v0.2.0",
    "26.02": "v0.3.0",
    "26.04": "v0.4.0",
    "26.06": "v0.5.0",
    "26.08": "HEAD 067f987d (v0.6.0)",
}
"""NeMo container -> Megatron-Bridge tag (`h100_recipe_table` module docstring)."""

LATER = ("26.02", "26.04", "26.06")
"""The releases with ``*_workload_base_configs.py`` V1/V2 configs."""


@dataclass(frozen=True, kw_only=True)
class H100Recipe:
    """One H100 pretraining configuration of one or more Megatron-Bridge releases."""

    key: str
    """Short unique id."""
    releases: tuple[str, ...]
    """NeMo containers that ship it (`RELEASE_TAGS`)."""
    cites: str
    """Tag, file and config (or function) names."""
    model: str
    """Model as the dev set spells Megatron-Bridge rows (release suffixes added by
    `h100_recipes.printed_model`)."""
    precision: str
    """``bf16``, ``fp8_cs`` (current scaling) or ``fp8_sc`` (blockwise sub-channel)."""
    num_gpus: int
    global_batch_size: int
    seq_length: int
    tp: int = 1
    pp: int = 1
    vpp: int = 1
    cp: int = 1
    ep: int = 1
    micro_batch_size: int = 1
    megatron_fsdp: bool = False
    token_drop: bool = False
    """25.09 ``apply_moe_token_drop`` (the rows labelled ``(tokendrop)``)."""
    plan_fields: dict[str, object] = field(default_factory=dict)
    """`ParallelPlan` fields of the recipe's full settings beyond the printed columns."""
    option_fields: dict[str, object] = field(default_factory=dict)
    """`ExecutionOptions` fields of the recipe's full settings."""
    unmodelled: tuple[str, ...] = ()
    """Recipe settings the cost model has no field for."""


NONE: dict[str, object] = {"recompute": "none", "recompute_modules": None}

V3 = "scripts/performance/configs"
HEAD = "src/megatron/bridge/perf_recipes"
