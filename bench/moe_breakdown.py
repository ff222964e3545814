"""Per-part breakdown of published MoE rows, side by side: where the predicted iteration of a
Megatron-core MoE plan goes.

For each row (``--rows``, matched like `bench/validate_published.py`): the published and
predicted seconds, the iteration `costmodel.iteration.Breakdown` of the critical stage, the
per-stage forward / backward seconds of one microbatch (with each stage's layer count), and
one MoE layer's microbatch passes split into attention and the rest of the layer, the
router, the expert GEMMs, the FP8 quantization of their operands
(`costmodel.runtimes.megatron.moe_experts`), the dispatcher's permutations, the EP
communication (total and exposed, eager and in the layer with
`ExecutionOptions.moe_a2a_overlap`) and the host-launch floor
(`costmodel.runtimes.megatron.moe_costs`); "rest of layer" is the layer without its host
floor minus the routed experts' kernels and the layer's exposed EP time.

Usage: ``python bench/moe_breakdown.py --rows 174,124,134``
"""

from __future__ import annotations

import dataclasses
import math
import sys

from published_csv import milliseconds, row_report_main
from row_figures import priced_row

from costmodel import compute as ops
from costmodel.passes import comm_groups
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.moe_costs import (
    dispatch_copies,
    dispatch_copy_bytes,
    expert_gemm3,
    moe_shape,
    routed_experts,
)
from costmodel.runtimes.megatron.moe_experts import expert_fp8_quantize_s
from costmodel.runtimes.registry import runtime_model
from costmodel.scale_up import RankPacking
from costmodel.topology import plan_placements
from profiles.store import load_profile
from specs.layer_kinds import MOE_LAYER


def moe_layer_parts(case) -> dict[str, tuple[float, float]]:
    """(forward, backward) milliseconds of one MoE layer's parts for one microbatch."""
    runtime = runtime_model(case.options)
    profile = runtime.priced_profile(load_profile(case.profile))
    plan, model, job, options = case.plan, case.model, case.job, case.options
    groups = comm_groups(plan_placements(profile, plan, RankPacking.of(case.cluster)))
    tokens = job.seq_length * plan.micro_batch_size / plan.cp
    tokens = tokens / plan.tp if plan.sequence_parallel else tokens
    elem = ops.element_bytes(job.precision)
    dtype = ops.gemm_dtype(job.precision)
    layer = layer_cost(model, job, plan, profile, kind=MOE_LAYER, groups=groups, options=options)
    bare = dataclasses.replace(options, moe_host_launch_s=0.0, moe_expert_launch_s=0.0)
    no_host = layer_cost(model, job, plan, profile, kind=MOE_LAYER, groups=groups, options=bare)
    fwd, bwd, dgrad, wgrad = routed_experts(
        model, plan, profile, tokens, elem, dtype, groups, options
    )
    shape = moe_shape(model, plan, tokens, options.moe_load_imbalance)
    m = max(math.ceil(shape.rows_per_expert), 1)
    gated = 2 if model.activation == "swiglu" else 1
    n1, n2 = math.ceil(gated * shape.width), math.ceil(shape.width)
    h = model.hidden_size
    e = shape.local_experts
    fused = options.moe_fused_grouped_mlp
    fc1 = expert_gemm3(profile, e, m, n1, h, dtype, fused=fused)
    fc2 = expert_gemm3(profile, e, m, h, n2, dtype, fused=fused)
    gemm_f, gemm_b = fc1[0] + fc2[0], fc1[1] + fc1[2] + fc2[1] + fc2[2]
    quant = (0.0, 0.0)
    if dtype == "fp8":
        quant = expert_fp8_quantize_s(
            profile,
            rows=shape.rows * plan.expert_tp,
            hidden=h,
            width=shape.width,
            gated=gated == 2,
            elem=elem,
            local_experts=e,
            fused=options.moe_fused_grouped_mlp,
            recipe=options.fp8_recipe,
        )
    copies = ops.memory_bound_time_s(
        profile,
        dispatch_copy_bytes(shape, h, elem, options.moe_dispatcher),
        num_ops=dispatch_copies(shape, options.moe_dispatcher),
    )
    return {
        "layer (all)": (layer.forward.duration_s, layer.backward.duration_s),
        "host floor": (
            layer.forward.duration_s - no_host.forward.duration_s,
            layer.backward.duration_s - no_host.backward.duration_s,
        ),
        "routed (all)": (fwd.duration_s, bwd.duration_s),
        "expert GEMMs": (gemm_f, gemm_b),
        "expert fp8 quantize": quant,
        "permute copies": (copies, copies),
        "ep comm": (fwd.ep_s, bwd.ep_s),
        "ep exposed (eager)": (fwd.ep_exposed_s, bwd.ep_exposed_s),
        "dgrad / wgrad": (dgrad, wgrad),
        "layer ep exposed": (layer.forward.ep_exposed_s, layer.backward.ep_exposed_s),
        "rest of layer": (
            no_host.forward.duration_s - fwd.compute_s - layer.forward.ep_exposed_s,
            no_host.backward.duration_s - bwd.compute_s - layer.backward.ep_exposed_s,
        ),
    }


def report(raw: dict[str, str]) -> str:
    """The breakdown of one row as text."""
    case, est, published = priced_row(raw)
    plan = case.plan
    lines = [
        f"row {raw['row_id']} {raw['source_id']} {raw['model']} {raw['gpu_type']}: {plan.label()}",
        f"  layout {plan.pipeline_model_parallel_layout or '-'}  microbatches "
        f"{plan.num_microbatches(case.job.global_batch_size)}  dispatcher "
        f"{case.options.moe_dispatcher}  graphs {sorted(case.options.cuda_graph_scopes)}",
        f"  published {published:.3f} s  predicted {est.iteration_time_s:.3f} s  "
        f"({est.iteration_time_s / published - 1:+.1%})  critical stage {est.critical_stage}",
        "  breakdown (s): "
        + "  ".join(f"{k} {v:.3f}" for k, v in est.breakdown.as_dict().items() if v > 1e-4),
        "  stage  layers  fwd ms/mb  bwd ms/mb",
    ]
    for st in est.stage_times:
        fwd, bwd = milliseconds(st.forward_s), milliseconds(st.backward_s)
        lines.append(f"  {st.pp_rank:5d}  {st.num_layers:6d}  {fwd}  {bwd}")
    lines.append("  one MoE layer, one microbatch:      fwd ms    bwd ms")
    for name, (f, b) in moe_layer_parts(case).items():
        lines.append(f"    {name:28s}{milliseconds(f)} {milliseconds(b)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return row_report_main(__doc__.splitlines()[0], report, argv)


if __name__ == "__main__":
    sys.exit(main())
