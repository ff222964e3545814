"""What Megatron-core refuses when CUDA graphs (`ExecutionOptions.cuda_graph_scopes`) meet a
model and a plan: the assertions of ``TransformerConfig.__post_init__``
(megatron/core/transformer/transformer_config.py, the ``cuda_graph_impl != "none"`` block).

Per-layer graphs are every scope set but ``full_iteration`` (Megatron-core's
``cuda_graph_impl`` ``local`` or ``transformer_engine``); a per-module set is what
`paraplan export` writes as ``--cuda-graph-impl transformer_engine``, so the
Transformer Engine rules apply to it. Each rule returns the broken relation, the values and
the fix, or None.
"""

from __future__ import annotations

from specs.model import ModelSpec
from specs.plan import ParallelPlan

WHOLE_STEP = "full_iteration"
"""`ExecutionOptions.cuda_graph_scopes` name of a captured forward-backward step."""
MOE_SCOPES = frozenset(("moe", "moe_router", "moe_preprocess"))
"""Scopes that capture part of a MoE layer."""


def per_layer_graphs(scopes: frozenset[str]) -> bool:
    """True when ``scopes`` capture parts of layers (Megatron-core's ``local`` or
    ``transformer_engine`` implementation), not the whole step or nothing."""
    return bool(scopes) and WHOLE_STEP not in scopes


def scope_set_problem(scopes: frozenset[str]) -> str | None:
    """The scope-set assertions: ``moe`` and ``moe_router`` exclude each other, and
    ``moe_preprocess`` is captured only with ``moe_router``."""
    if {"moe", "moe_router"} <= scopes:
        return (
            "cuda graph scopes moe and moe_router exclude each other (Megatron-core: "
            "'cuda_graph_modules must not contain both moe and moe_router'): keep one"
        )
    if "moe_preprocess" in scopes and "moe_router" not in scopes:
        return (
            "cuda graph scope moe_preprocess is captured only with moe_router (Megatron-core: "
            "'moe_preprocess cuda graph is only supported with moe_router cuda graph'): add "
            "moe_router"
        )
    return None


def full_recompute_problem(plan: ParallelPlan, scopes: frozenset[str]) -> str | None:
    """Full recompute runs only under a whole-step graph ("full recompute is only supported
    with full iteration CUDA graph")."""
    if plan.recompute != "full" or not per_layer_graphs(scopes):
        return None
    return (
        f"recompute (full) with per-layer CUDA graphs ({', '.join(sorted(scopes))}): "
        "Megatron-core runs full recompute only under --cuda-graph-impl full_iteration; use "
        "selective or no recompute, --cuda-graph-impl full_iteration, or no CUDA graphs"
    )


def moe_recompute_problem(plan: ParallelPlan, scopes: frozenset[str]) -> str | None:
    """Selective recompute of ``moe`` cannot cover a captured ``moe_router`` ("moe recompute
    is not supported with moe_router CUDA graph", Transformer Engine graphs)."""
    modules = plan.recompute_modules or ("core_attn",)
    if plan.recompute != "selective" or "moe" not in modules or "moe_router" not in scopes:
        return None
    return (
        f"recompute_modules ({', '.join(modules)}) recomputes the whole MoE block, which "
        "covers the captured moe_router graph (Megatron-core: 'moe recompute is not "
        "supported with moe_router CUDA graph'): drop moe from --recompute-modules, or "
        "moe_router from --cuda-graph-scope"
    )


def cpu_offloading_problem(plan: ParallelPlan, scopes: frozenset[str]) -> str | None:
    """Layer-level activation offloading runs without per-layer graphs ("CUDA graphs not
    supported with CPU offloading")."""
    if plan.cpu_offloading_num_layers == 0 or not per_layer_graphs(scopes):
        return None
    return (
        f"cpu_offloading_num_layers ({plan.cpu_offloading_num_layers}) with per-layer CUDA "
        "graphs: Megatron-core raises 'CUDA graphs not supported with CPU offloading'; drop "
        "--cpu-offloading-num-layers, or use --cuda-graph-impl full_iteration or none"
    )


def model_scope_problem(model: ModelSpec, scopes: frozenset[str]) -> str | None:
    """MoE scopes need MoE layers; ``mlp`` needs a dense MLP layer ("moe cuda graph is only
    supported for MoE", "mlp cuda graph is only supported for dense layers")."""
    moe = sorted(scopes & MOE_SCOPES)
    if moe and not model.is_moe:
        return (
            f"cuda graph scopes {', '.join(moe)} capture MoE layers, and {model.name} is "
            "dense: use attn or mlp"
        )
    if "mlp" in scopes and model.is_moe and model.num_moe_layers == model.num_layers:
        return (
            f"cuda graph scope mlp captures dense MLPs, and every layer of {model.name} is a "
            "MoE layer: use moe_router (with moe_preprocess) instead"
        )
    return None
