"""Recipe flags that move a Megatron-core step's time, not its memory: the MoE token
dispatcher and its all-to-all overlap, CUDA graph capture, the fused rotary embedding,
Transformer Engine's fused grouped MLP, the FlashAttention generation and the userbuffers
methods of TP overlap (`costmodel.execution.ExecutionOptions`, each field's docstring).

Each flag keeps the Megatron-LM argument's name where Megatron-LM has one
(`megatron/training/arguments.py`) and Megatron-Bridge's where only the recipe does.
Conversion only maps flags to fields; the values are checked by `ExecutionOptions`
(`SpecError` with the rule and the valid names). A flag left out keeps the default of
Megatron-core and Transformer Engine.
"""

from __future__ import annotations

import argparse
from typing import Any

from costmodel.cuda_graph_rules import (
    cpu_offloading_problem,
    full_recompute_problem,
    model_scope_problem,
    moe_recompute_problem,
    scope_set_problem,
)
from costmodel.execution import ExecutionOptions
from costmodel.execution_rules import MOE_DISPATCHERS, TP_OVERLAP_RS_METHODS
from specs.errors import SpecError
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules_base import Violation

CUDA_GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")
"""Choices of ``--cuda-graph-impl``: Megatron-LM's ``--cuda-graph-impl`` (``none``, its
default; ``local``, Megatron-core's graph manager; ``transformer_engine``, TE's
``make_graphed_callables``; ``full_iteration``, the whole forward-backward step)."""

WHOLE_LAYER_SCOPE = "layer"
"""`ExecutionOptions.cuda_graph_scopes` name of Megatron-core's empty ``--cuda-graph-scope``
list: every transformer layer captured whole."""

WHOLE_STEP_SCOPE = "full_iteration"
"""`ExecutionOptions.cuda_graph_scopes` name of a captured forward-backward step:
``--cuda-graph-impl full_iteration``, or ``--cuda-graph-scope full_iteration`` of the
Megatron-core releases that spelled it as a scope."""


def add_time_recipe_args(group: argparse._ArgumentGroup) -> None:
    """The time-only recipe flags, added to the recipe settings ``group``: the MoE
    dispatcher flags, the CUDA graph flags, the kernel flags and the userbuffers flags, in
    that order (the order of ``--help``)."""
    add_moe_dispatch_args(group)
    add_cuda_graph_args(group)
    add_kernel_args(group)
    add_tp_overlap_method_args(group)


def add_moe_dispatch_args(group: argparse._ArgumentGroup) -> None:
    """``--moe-token-dispatcher-type`` and ``--overlap-moe-expert-parallel-comm``
    (`ExecutionOptions.moe_dispatcher`, ``moe_a2a_overlap``), added to ``group``."""
    group.add_argument(
        "--moe-token-dispatcher-type",
        choices=MOE_DISPATCHERS,
        default=None,
        help="MoE token dispatcher (Megatron --moe-token-dispatcher-type): alltoall (default), "
        "flex (DeepEP or HybridEP, what Megatron-Bridge's moe_flex_dispatcher_backend "
        "deepep|hybridep selects; both priced alike) or allgather",
    )
    group.add_argument(
        "--overlap-moe-expert-parallel-comm",
        action="store_true",
        help="overlap the EP dispatch and combine of one microbatch with another's compute "
        "in the 1F1B steady state (Megatron --overlap-moe-expert-parallel-comm, with "
        "--delay-wgrad-compute; Megatron-Bridge moe_a2a_overlap); applied with ep > 1, the "
        "alltoall or flex dispatcher, no full recompute and, for pp > 1, vpp > 1",
    )


def add_cuda_graph_args(group: argparse._ArgumentGroup) -> None:
    """``--cuda-graph-impl`` and ``--cuda-graph-scope`` (`ExecutionOptions.cuda_graph_scopes`,
    Megatron-LM's names), added to ``group``."""
    group.add_argument(
        "--cuda-graph-impl",
        choices=CUDA_GRAPH_IMPLS,
        default=None,
        help="CUDA graph capture (Megatron --cuda-graph-impl): none (default, eager), local "
        "or transformer_engine (each captured part replays without host launches), "
        "full_iteration (the whole step)",
    )
    group.add_argument(
        "--cuda-graph-scope",
        "--cuda-graph-modules",
        nargs="+",
        default=None,
        metavar="SCOPE",
        help="with --cuda-graph-impl local|transformer_engine: the captured parts, space- or "
        "comma-separated (Megatron --cuda-graph-scope, later --cuda-graph-modules): attn, "
        "mlp, moe, moe_router, moe_preprocess, mamba (a hybrid model's Mamba layers), or "
        "full_iteration alone; default: the whole layer",
    )


def add_kernel_args(group: argparse._ArgumentGroup) -> None:
    """The kernel choices that move a step's time, added to ``group``: ``--rope-fusion``,
    ``--cutedsl-fused-grouped-mlp``, ``--cudnn-norm`` and ``--flash-attention-version``
    (`ExecutionOptions.rope_fusion`, ``moe_fused_grouped_mlp``, ``cudnn_norm``,
    ``flash_attention_version``)."""
    group.add_argument(
        "--rope-fusion",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--no-rope-fusion: unfused rotary embeddings (Megatron --no-rope-fusion; "
        "Megatron-core also takes this path for YaRN without mscale, as GPT-OSS); default: "
        "TE's fused kernel",
    )
    group.add_argument(
        "--cutedsl-fused-grouped-mlp",
        action="store_true",
        help="routed experts as Transformer Engine's fused grouped MLP (Megatron-Bridge "
        "cutedsl_fused_grouped_mlp: Megatron --use-transformer-engine-op-fuser with "
        "NVTE_CUTEDSL_FUSED_GROUPED_MLP=1, MXFP8 on Blackwell, TE 2.16+); default: TE "
        "GroupedLinear, one GEMM and quantization per expert",
    )
    group.add_argument(
        "--cudnn-norm",
        action="store_true",
        help="Transformer Engine's norms on cuDNN (the launch sets NVTE_NORM_FWD_USE_CUDNN=1 "
        "and NVTE_NORM_BWD_USE_CUDNN=1, as Megatron-Bridge keeps for some recipes): with "
        "--precision fp8, MXFP8 fuses the norm-output quantization into the norm and current "
        "scaling loses the norm's amax (a full amax pass); default TE's own norms",
    )
    group.add_argument(
        "--flash-attention-version",
        type=int,
        choices=(2, 3),
        default=None,
        help="generation of the fused attention kernels: 3 (default; FlashAttention-3-class, "
        "TE from v1.11) or 2 (stacks before FA3, 2024-07: FA3 curves scaled to FA2's rate)",
    )


def add_tp_overlap_method_args(group: argparse._ArgumentGroup) -> None:
    """The userbuffers settings of ``--tp-comm-overlap``: the row-parallel reduce-scatter
    method and the SM margins of the bulk and pipeline overlaps
    (`ExecutionOptions.tp_overlap_rs_method`, ``tp_overlap_bulk_sm_margin``,
    ``tp_overlap_pipeline_sm_margin``), added to ``group``."""
    group.add_argument(
        "--tp-comm-overlap-rs-method",
        choices=TP_OVERLAP_RS_METHODS,
        default=None,
        help="with --tp-comm-overlap: userbuffers method of the row-parallel forward "
        "reduce-scatter (proj_fprop, fc2_fprop; Megatron --tp-comm-overlap-cfg): pipeline "
        "(TE's default) or ring_exchange (Megatron-Bridge's FP8 Llama configurations)",
    )
    group.add_argument(
        "--tp-comm-overlap-bulk-sm-margin",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --tp-comm-overlap: whether the bulk overlaps (qkv/fc1 dgrad and wgrad) "
        "reserve their communication SMs for the whole GEMM (set_sm_margin in "
        "--tp-comm-overlap-cfg; default yes, as TE); --no-tp-comm-overlap-bulk-sm-margin: "
        "the GEMM keeps every SM, as every Megatron-Bridge configuration",
    )
    group.add_argument(
        "--tp-comm-overlap-pipeline-sm-margin",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --tp-comm-overlap: whether the pipeline reduce-scatter overlap (proj/fc2 "
        "forward) runs its GEMM chunks on SMs - 16 (set_sm_margin; default yes, as TE from "
        "v2.0); --no-tp-comm-overlap-pipeline-sm-margin: every SM, as TE 1.x's defaults",
    )


def time_option_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The `ExecutionOptions` fields the time-only recipe flags of ``args`` set; empty
    where none is given (a command without these flags included). `SpecError` for a
    CUDA graph scope without an implementation, and for a userbuffers method without
    ``--tp-comm-overlap``."""
    fields: dict[str, Any] = {}
    if getattr(args, "moe_token_dispatcher_type", None) is not None:
        fields["moe_dispatcher"] = args.moe_token_dispatcher_type
    if getattr(args, "overlap_moe_expert_parallel_comm", False):
        fields["moe_a2a_overlap"] = True
    scopes = cuda_graph_scopes(args)
    if scopes is not None:
        fields["cuda_graph_scopes"] = scopes
    if getattr(args, "rope_fusion", None) is not None:
        fields["rope_fusion"] = args.rope_fusion
    if getattr(args, "cutedsl_fused_grouped_mlp", False):
        fields["moe_fused_grouped_mlp"] = True
    if getattr(args, "cudnn_norm", False):
        fields["cudnn_norm"] = True
    if getattr(args, "flash_attention_version", None) is not None:
        fields["flash_attention_version"] = args.flash_attention_version
    return fields | userbuffers_fields(args)


def cuda_graph_scopes(args: argparse.Namespace) -> frozenset[str] | None:
    """`ExecutionOptions.cuda_graph_scopes` of ``--cuda-graph-impl`` and
    ``--cuda-graph-scope``, or None where neither is given. Megatron-core's empty scope list
    is the whole layer (`WHOLE_LAYER_SCOPE`); ``full_iteration``, as an implementation or a
    scope, is the whole step and stands alone."""
    impl = getattr(args, "cuda_graph_impl", None)
    given = getattr(args, "cuda_graph_scope", None)
    names = frozenset(
        part.strip() for item in given or () for part in item.split(",") if part.strip()
    )
    if given is not None and impl in (None, "none", "full_iteration"):
        raise SpecError(
            f"--cuda-graph-scope {' '.join(sorted(names))} names the parts that "
            f"--cuda-graph-impl local|transformer_engine captures, got --cuda-graph-impl "
            f"{impl or 'none'}; add --cuda-graph-impl transformer_engine (or local), or drop "
            "--cuda-graph-scope"
        )
    if impl is None or impl == "none":
        return None if impl is None else frozenset()
    if impl == WHOLE_STEP_SCOPE:
        return frozenset({WHOLE_STEP_SCOPE})
    if WHOLE_STEP_SCOPE in names and len(names) > 1:
        raise SpecError(
            f"--cuda-graph-scope {WHOLE_STEP_SCOPE} captures the whole step, so it stands "
            f"alone; got {', '.join(sorted(names))}: drop the other scopes"
        )
    problem = scope_set_problem(names)
    if problem is not None:
        raise SpecError(f"--cuda-graph-scope {' '.join(sorted(names))}: {problem}")
    return names or frozenset({WHOLE_LAYER_SCOPE})


CUDA_GRAPH_RULES = {
    "cuda_graph_full_recompute": full_recompute_problem,
    "cuda_graph_moe_recompute": moe_recompute_problem,
    "cuda_graph_cpu_offloading": cpu_offloading_problem,
}
"""`Violation.rule` -> the plan rule of `costmodel.cuda_graph_rules` it reports."""
CUDA_GRAPH_MODEL_RULE = "cuda_graph_scopes_match_model"
"""`Violation.rule` of `costmodel.cuda_graph_rules.model_scope_problem`."""


def cuda_graph_violations(
    model: ModelSpec, plan: ParallelPlan, options: ExecutionOptions
) -> list[Violation]:
    """What Megatron-core's ``TransformerConfig`` refuses when the CUDA graphs of
    ``options`` meet ``model`` and ``plan`` (`costmodel.cuda_graph_rules`), as plan
    violations that `paraplan estimate` reports before pricing."""
    scopes = options.cuda_graph_scopes
    found = [(rule, check(plan, scopes)) for rule, check in CUDA_GRAPH_RULES.items()]
    found.append((CUDA_GRAPH_MODEL_RULE, model_scope_problem(model, scopes)))
    return [Violation(rule=rule, message=text) for rule, text in found if text is not None]


def userbuffers_fields(args: argparse.Namespace) -> dict[str, Any]:
    """`ExecutionOptions.tp_overlap_rs_method`, ``tp_overlap_bulk_sm_margin`` and
    ``tp_overlap_pipeline_sm_margin`` of their
    flags; `SpecError` where a plan flag turns TP overlap off (``args.tp_comm_overlap``
    False; None, searched by `paraplan plan`, accepts them)."""
    fields: dict[str, Any] = {}
    if getattr(args, "tp_comm_overlap_rs_method", None) is not None:
        fields["tp_overlap_rs_method"] = args.tp_comm_overlap_rs_method
    if getattr(args, "tp_comm_overlap_bulk_sm_margin", None) is not None:
        fields["tp_overlap_bulk_sm_margin"] = args.tp_comm_overlap_bulk_sm_margin
    if getattr(args, "tp_comm_overlap_pipeline_sm_margin", None) is not None:
        fields["tp_overlap_pipeline_sm_margin"] = args.tp_comm_overlap_pipeline_sm_margin
    if fields and getattr(args, "tp_comm_overlap", None) is False:
        flags = {
            "tp_overlap_rs_method": "--tp-comm-overlap-rs-method",
            "tp_overlap_bulk_sm_margin": "--[no-]tp-comm-overlap-bulk-sm-margin",
            "tp_overlap_pipeline_sm_margin": "--[no-]tp-comm-overlap-pipeline-sm-margin",
        }
        raise SpecError(
            f"{' and '.join(flags[f] for f in fields)} set how Transformer Engine's "
            "userbuffers overlap TP communication; add --tp-comm-overlap (without it no "
            "userbuffers run)"
        )
    return fields


A2A_OVERLAP_RULE = "overlap_moe_expert_parallel_comm_requirements"
"""`Violation.rule` of `a2a_overlap_violations`."""


A2A_OVERLAP_FIXES = {
    "ep": "raise --ep",
    "dispatcher": "give --moe-token-dispatcher-type alltoall|flex",
    "recompute": "change --recompute",
    "vpp": "give --vpp 2 or more",
}
"""How to meet each requirement of `costmodel.runtimes.megatron.moe_a2a_overlap.a2a_overlap_unmet`
on the command line."""


def a2a_overlap_violations(plan: ParallelPlan, options: ExecutionOptions) -> list[Violation]:
    """What Megatron-core refuses when ``--overlap-moe-expert-parallel-comm`` is set
    (`ExecutionOptions.moe_a2a_overlap`) for ``plan``
    (`costmodel.runtimes.megatron.moe_a2a_overlap.a2a_overlap_unmet`). The cost model would not
    apply the overlap there, so `paraplan estimate` reports these as plan violations
    instead of pricing the plan without it."""
    if not options.moe_a2a_overlap:
        return []
    # the megatron runtime (networkx) is imported only when the flag is given: start-up stays light
    from costmodel.runtimes.megatron.moe_a2a_overlap import a2a_overlap_unmet

    flag = "--overlap-moe-expert-parallel-comm"
    return [
        Violation(
            rule=A2A_OVERLAP_RULE,
            message=f"{flag} needs {found}: {A2A_OVERLAP_FIXES[key]}, or drop {flag}",
        )
        for key, found in a2a_overlap_unmet(plan, options).items()
    ]


def refuse_scopes_the_model_lacks(model: ModelSpec, options: ExecutionOptions) -> None:
    """`SpecError` where the CUDA graph scopes of ``options`` capture modules ``model`` does
    not have (`costmodel.cuda_graph_rules.model_scope_problem`): `paraplan plan` cannot
    search around them."""
    problem = model_scope_problem(model, options.cuda_graph_scopes)
    if problem is not None:
        raise SpecError(problem)
