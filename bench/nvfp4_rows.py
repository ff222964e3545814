"""Where the predicted iteration of a published NVFP4 row goes: the GEMMs, the NVFP4
quantization of their operands and the tensor-parallel communication of one dense layer,
beside the iteration's `costmodel.iteration.Breakdown`.

For each row (``--rows``, default the dev set's Megatron-Bridge Llama 3 70B and Llama 3.1
405B NVFP4 rows; an FP8 row's split reads the same, its casts under the row's FP8 recipe
on the row's device, `costmodel.execution_presets.device_options`): the published and
predicted seconds and the breakdown of the critical
stage; then one dense decoder layer's forward and backward of one microbatch split into

- the eight linear GEMMs (QKV, attention output, FC1, FC2; fprop in the forward, dgrad and
  wgrad in the backward: `costmodel.runtimes.megatron.layer_shape.gemm3`);
- the quantization of their operands (`costmodel.runtimes.megatron.pair_quantization.fp8_pair_s`
  of both pairs: amax pass and NVFP4 casts);
- the TP collectives of both pairs with the amax all-reduces (`tp_pair`, `fp8_amax_pair`):
  their whole time, the part left exposed, and the bytes moved;
- the rest of the layer (attention core, norms, element-wise work).

"layer x stage" multiplies one layer's forward + backward by the critical stage's layers
and the microbatches: the share of the iteration each part takes on that stage.

Usage: ``python bench/nvfp4_rows.py [--rows 285,249,...]``
"""

from __future__ import annotations

import sys

from published_csv import milliseconds, row_report_main
from row_figures import priced_row

from costmodel.execution_presets import device_options
from costmodel.passes import comm_groups
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.layer_shape import gemm3, layer_shape
from costmodel.runtimes.megatron.linear_pairs import tp_pair
from costmodel.runtimes.megatron.pair_quantization import fp8_amax_pair, fp8_pair_s
from costmodel.runtimes.registry import runtime_model
from costmodel.scale_up import RankPacking
from costmodel.topology import plan_placements
from profiles.store import load_profile
from specs.layer_kinds import DENSE_LAYER

DEFAULT_ROWS = "285,249,162,205,284,159,204,118,121,166,169,211,212,255,256,291,292"
"""The Megatron-Bridge NVFP4 rows of Llama 3 70B (GB200 tp2, GB300 tp1) and Llama 3.1 405B
(tp4) in ``published-runs-dev.csv``."""


def dense_layer_parts(case) -> dict[str, tuple[float, float]]:
    """(forward, backward) seconds of one dense layer's parts for one microbatch (module
    doc); ``tp GB``: the gigabytes the TP collectives move in each pass."""
    options = device_options(case.options, load_profile(case.profile))
    runtime = runtime_model(options)
    profile = runtime.priced_profile(load_profile(case.profile))
    plan, model, job = case.plan, case.model, case.job
    groups = comm_groups(plan_placements(profile, plan, RankPacking.of(case.cluster)))
    x = layer_shape(job, plan)
    h, tp = model.hidden_size, x.tp
    q = model.num_attention_heads * model.head_dim / tp
    kv = 2 * model.query_groups * model.head_dim / tp
    width = model.ffn_hidden_size / tp
    fc1_width = (2 if model.activation == "swiglu" else 1) * width
    shapes = {
        "qkv": (x.tokens, q + kv, h),
        "proj": (x.tokens, h, q),
        "fc1": (x.tokens, fc1_width, h),
        "fc2": (x.tokens, h, width),
    }
    gemms = {name: gemm3(profile, x, *shape) for name, shape in shapes.items()}
    recipe, cudnn = options.fp8_recipe, options.cudnn_norm
    cast = {
        "fused_rht": options.nvfp4_fused_rht_cast,
        "tn_gemm_only": options.fp8_tn_gemm_only is not False,
    }
    att_q = fp8_pair_s(profile, x, h, q + kv, q, recipe, cudnn, **cast)
    mlp_q = fp8_pair_s(profile, x, h, fc1_width, width, recipe, cudnn, **cast)
    att_tp = tp_pair(profile, plan, x, h, groups, shapes["qkv"], shapes["proj"], options)
    mlp_tp = tp_pair(profile, plan, x, h, groups, shapes["fc1"], shapes["fc2"], options)
    att_amax = fp8_amax_pair(profile, x, groups, recipe, q)
    mlp_amax = fp8_amax_pair(profile, x, groups, recipe, width)
    tp = [
        a.plus(b).plus(c).plus(d)
        for a, b, c, d in zip(att_tp, mlp_tp, att_amax, mlp_amax, strict=True)
    ]
    layer = layer_cost(model, job, plan, profile, kind=DENSE_LAYER, groups=groups, options=options)
    gemm_f = sum(g[0] for g in gemms.values())
    gemm_b = sum(g[1] + g[2] for g in gemms.values())
    quant = (att_q[0] + mlp_q[0], att_q[1] + mlp_q[1])
    parts = {
        "layer (all)": (layer.forward.duration_s, layer.backward.duration_s),
        "linear GEMMs": (gemm_f, gemm_b),
        "nvfp4 quantize": quant,
        "tp comm (all)": (tp[0].tp_s, tp[1].tp_s),
        "tp comm exposed": (tp[0].tp_exposed_s, tp[1].tp_exposed_s),
    }
    parts["rest of layer"] = tuple(  # type: ignore[assignment]
        parts["layer (all)"][i] - parts["linear GEMMs"][i] - quant[i] - tp[i].tp_exposed_s
        for i in (0, 1)
    )
    parts["tp GB"] = (tp[0].tp_bytes / 1e9, tp[1].tp_bytes / 1e9)
    return parts


def report(raw: dict[str, str]) -> str:
    """The split of one row as text."""
    case, est, published = priced_row(raw)
    plan = case.plan
    microbatches = plan.num_microbatches(case.job.global_batch_size)
    stage = est.stage_times[est.critical_stage]
    lines = [
        f"row {raw['row_id']} {raw['source_id']} {raw['model']} {raw['gpu_type']}: "
        f"{plan.label()}  tp_comm_overlap {plan.tp_comm_overlap}  "
        f"fp8_recipe {case.options.fp8_recipe}  fp4_param {case.options.fp4_param}  "
        f"fused RHT cast {case.options.nvfp4_fused_rht_cast}",
        f"  published {published:.3f} s  predicted {est.iteration_time_s:.3f} s  "
        f"({est.iteration_time_s / published - 1:+.1%})  microbatches {microbatches}",
        "  breakdown (s): "
        + "  ".join(f"{k} {v:.3f}" for k, v in est.breakdown.as_dict().items() if v > 1e-4),
        f"  one dense layer, one microbatch:  fwd ms    bwd ms   layer x stage s "
        f"({stage.num_layers} layers x {microbatches})",
    ]
    per_stage = stage.num_layers * microbatches
    for name, (f, b) in dense_layer_parts(case).items():
        if name == "tp GB":
            lines.append(f"    {name:22s}{f:9.3f} {b:9.3f}")
            continue
        lines.append(
            f"    {name:22s}{milliseconds(f)} {milliseconds(b)}  {(f + b) * per_stage:9.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return row_report_main(__doc__.splitlines()[0], report, argv, default_rows=DEFAULT_ROWS)


if __name__ == "__main__":
    sys.exit(main())
