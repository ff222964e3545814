"""Checks of three explanations for the GPT-OSS 120B rows' residual, each against the rows.

For each Megatron-Bridge GPT-OSS row (``--rows``, matched like `bench/validate_published.py`)
it prints the published and predicted seconds, then:

- ``unfused``: the prediction and peak memory with `ExecutionOptions.attention`
  ``materialized``, the path Transformer Engine takes when it disables both FlashAttention
  and cuDNN FusedAttention (``UnfusedDotProductAttention``: batched GEMMs over the whole
  S x S score matrix, softmax and mask kernels, the probabilities saved for backward).
  Transformer Engine disables FlashAttention for every ``softmax_type`` but ``vanilla``
  (GPT-OSS's learnable sinks) and keeps FusedAttention for learnable sinks from cuDNN
  9.13.1 (`transformer_engine/pytorch/attention/dot_product_attention/utils.py`
  ``get_attention_backend``, "Filter: Softmax type"; `transformer_engine/common/fused_attn/
  fused_attn.cpp` ``nvte_get_fused_attn_backend``, "softmax type"; TE v2.9 and the commits
  Megatron-Bridge v0.3.0, v0.4.0 and v0.5.0 pin in their ``pyproject.toml``). A row whose
  unfused peak exceeds its device ran FusedAttention.
- ``core``: the attention core's seconds in one layer's forward plus backward as priced
  (every layer at full causal cost: the kernel time takes
  `costmodel.flops.core_attention_forward_flops_per_token` for sliding-window layers too, so a
  cuDNN kernel that skipped the tiles outside the band would only make the prediction
  faster) and its share of the layer.
- ``host``: the forward launches at which one MoE layer's kernels equal its host time at
  `ExecutionOptions.moe_host_launch_s` (the layer's forward divided by the launch price),
  the MoE launches already priced (`moe_launches.moe_host_launches`, the per-expert C++
  ones counted at their share of a Python-level launch's price,
  `ExecutionOptions.moe_expert_launch_s` over `moe_host_launch_s`) and those plus the
  eager attention block's (`ATTENTION_BLOCK_LAUNCHES`, none when the recipe captures
  ``attn``); ``adds`` is what the extra launches would add to the iteration, at most,
  priced as the dropless floor prices them (every launch past the break-even, every layer
  and microbatch, forward only).

Usage: ``python bench/gpt_oss_attention.py --rows oss``
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from published_csv import default_csv, read_rows, select_rows
from published_rows import RowCase
from recipe_keys import NotExpressible
from row_figures import case_estimate, published_case

from costmodel import compute as ops
from costmodel.attention_core import attention_core_time_s
from costmodel.flops import core_attention_forward_flops_per_token
from costmodel.passes import comm_groups
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.moe_costs import moe_shape
from costmodel.runtimes.megatron.moe_launches import WHOLE_MOE_SCOPES, moe_host_launches
from costmodel.runtimes.registry import runtime_model
from costmodel.scale_up import RankPacking
from costmodel.topology import plan_placements
from profiles.store import load_profile
from specs.layer_kinds import MOE_LAYER

ATTENTION_BLOCK_LAUNCHES = 30
"""Forward launches of a Megatron-core attention block with Transformer Engine modules and
the unfused YaRN RoPE, counted from the code (a lower count: reshapes that copy and the
rotary frequencies are left out): the RMSNorm and QKV GEMM of ``LayerNormLinear`` (2,
bias in the GEMM epilogue), the RoPE of q and k (12 each: Megatron-core
``rope_utils._apply_rotary_pos_emb_bshd``: cos, sin, two ``mscale`` products, two casts,
``t * cos``, ``_rotate_half``'s negation and ``cat``, its product with sin, the sum and the
final ``cat``), cuDNN's attention kernel (1), the output projection (1), the
bias-dropout-add (1; ``GPTOSSProvider`` turns its fusion off, which launches more) and the
pre-MLP RMSNorm (1)."""


def layer_parts(case: RowCase) -> tuple[float, float, float, float]:
    """(attention core seconds of one layer's forward + backward, that layer's forward +
    backward seconds without the host floor, launches at which its forward kernels equal
    its host time, the MoE launches priced for that forward) for one microbatch."""
    runtime = runtime_model(case.options)
    profile = runtime.priced_profile(load_profile(case.profile))
    plan, model, job, options = case.plan, case.model, case.job, case.options
    groups = comm_groups(plan_placements(profile, plan, RankPacking.of(case.cluster)))
    bare = dataclasses.replace(options, moe_host_launch_s=0.0, moe_expert_launch_s=0.0)
    layer = layer_cost(model, job, plan, profile, kind=MOE_LAYER, groups=groups, options=bare)
    tokens = job.seq_length * plan.micro_batch_size / plan.cp
    local = moe_shape(model, plan, tokens).local_experts
    launches = moe_host_launches(
        local,
        ops.gemm_dtype(job.precision) == "fp8",
        "forward",
        fused_mlp=options.moe_fused_grouped_mlp,
        dispatcher=options.moe_dispatcher,
        biased=model.add_bias_linear,
    )
    priced = launches.host_s(options.moe_host_launch_s, options.moe_expert_launch_s)
    flops = core_attention_forward_flops_per_token(model, job.seq_length) * tokens / plan.tp
    core = sum(
        attention_core_time_s(
            profile,
            causal_forward_flops=flops,
            batch_heads=plan.micro_batch_size * model.num_attention_heads / plan.tp,
            seq_q=job.seq_length / plan.cp,
            seq_kv=job.seq_length,
            head_dim=model.head_dim,
            precision=job.precision,
            kernel=options.attention,
            direction=direction,
        )
        for direction in ("forward", "backward")
    )
    whole = layer.forward.duration_s + layer.backward.duration_s
    launch_s = options.moe_host_launch_s
    return core, whole, layer.forward.duration_s / launch_s, priced / launch_s


def report(raw: dict[str, str]) -> str:
    """One row's line: published, shipped, unfused (with peak GiB), core, host."""
    case, published = published_case(raw)
    base = case_estimate(case)
    # Transformer Engine's unfused attention runs in 16 bits: FP8 attention needs the fused kernel
    unfused = case_estimate(
        case,
        options=dataclasses.replace(case.options, attention="materialized", fp8_attention=False),
    )
    core, whole, even, priced = layer_parts(case)
    scopes = case.options.cuda_graph_scopes
    eager = 0 if scopes & ({"attn"} | WHOLE_MOE_SCOPES) else ATTENTION_BLOCK_LAUNCHES
    # MoE layer forwards one pipeline rank runs per iteration
    microbatches = case.plan.num_microbatches(case.job.global_batch_size)
    passes = case.model.num_layers / case.plan.pp * microbatches
    adds = max(0.0, priced + eager - max(even, priced)) * case.options.moe_host_launch_s * passes

    def err(t: float) -> str:
        return f"{t:6.3f} ({t / published - 1:+6.1%})"

    return (
        f"{raw['row_id']:>4} {raw['source_id']:<17} {raw['gpu_type'].split()[0]:<6} "
        f"{case.plan.label():<44} pub {published:6.3f}  model {err(base.iteration_time_s)}  "
        f"unfused {err(unfused.iteration_time_s)} {unfused.peak_memory_gib:5.0f}/"
        f"{unfused.device_memory_bytes / 2**30:.0f} GiB  core {core * 1e3:5.2f} ms "
        f"({core / whole:4.1%})  host {even:4.0f} to bind, {priced:.0f} + {eager} eager, "
        f"adds {adds:5.3f} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="gpt oss", help="row ids, source ids or model text")
    parser.add_argument("--csv", default=None)
    args = parser.parse_args(argv)
    path = args.csv or default_csv()
    if path is None:
        print("published-runs-dev.csv not found; pass --csv", file=sys.stderr)
        return 2
    rows = [r for r in select_rows(read_rows(path), args.rows) if "oss" in r["model"].lower()]
    for raw in rows:
        try:
            print(report(raw))
        except NotExpressible as exc:
            print(f"{raw['row_id']:>4} {raw['source_id']:<17} set apart: {exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
