"""Megatron-Bridge's Qwen3-Next 80B-A3B pre-training recipe, priced (a user trial).

The recipe: NVIDIA-NeMo/Megatron-Bridge ``src/megatron/bridge/recipes/qwen/h100/qwen3_next.py``
``qwen3_next_80b_a3b_pretrain_32gpu_h100_bf16_config`` (tag v0.6.0; HEAD 067f987d holds the
same file), on ``_pretrain_common`` (``src/megatron/bridge/recipes/common.py``):

- 32 H100 GPUs; tp 1, pp 4 (no layout, no virtual stages), cp 1, ep 8, etp 1, no sequence
  parallelism; sequence 4096; global batch 32 and micro-batch 2 (``TrainingConfig`` of
  ``_pretrain_common``: the recipe sets neither);
- bf16 (``bf16_mixed``); the distributed optimizer with gradient-reduce and parameter-gather
  overlap and fp32 gradient reduction (``grad_reduce_in_fp32=True``), Adam with fp32
  states;
- selective recompute of ``layernorm``, ``moe`` and ``moe_act``; one MTP depth (the
  preset's); the fused native cross entropy (``cross_entropy_loss_fusion`` with
  ``cross_entropy_fusion_impl = "native"``);
- ``apply_flex_dispatcher_backend(cfg.model, "deepep")``: on a Hopper GPU the token
  dispatcher becomes ``flex`` with DeepEP (``src/megatron/bridge/training/
  flex_dispatcher_backend.py``).

The recipe leaves routing unforced (``moe_router_force_load_balancing = False``); the cost
model prices balanced routing. No published throughput exists for this recipe: the script
prints only the model's figures (iteration time, tokens per second, model TFLOP/s per GPU,
MFU, peak memory per GPU and whether it fits), for the plan as the recipe sets it and, for
comparison, without recompute.

Usage: ``python bench/qwen3_next_recipe.py [--json]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from costmodel.estimate import Estimate, estimate_plan
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.formats import percent
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.presets import get_preset

HARDWARE = "h100-sxm-80gb"
GPUS = 32
RECIPE_OPTIONS: ExecutionOptions = dataclasses.replace(
    DEFAULT_OPTIONS, moe_dispatcher="flex", cross_entropy_fusion="native"
)
"""The recipe's DeepEP flex dispatcher and fused native cross entropy (module docstring)."""


def recipe_plan(*, recompute: bool = True) -> ParallelPlan:
    """The recipe's parallel plan (module docstring); ``recompute`` False drops its
    selective recompute."""
    savers: dict[str, object] = (
        {"recompute": "selective", "recompute_modules": ("layernorm", "moe", "moe_act")}
        if recompute
        else {}
    )
    return ParallelPlan.for_world(
        GPUS,
        tp=1,
        pp=4,
        ep=8,
        etp=1,
        micro_batch_size=2,
        distributed_optimizer=True,
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        **savers,  # type: ignore[arg-type]
    )


def price(model: ModelSpec, plan: ParallelPlan) -> Estimate:
    """`estimate_plan` of ``plan`` for the recipe's job on 32 H100 SXM GPUs."""
    cluster = ClusterSpec(hardware=HARDWARE, num_gpus=GPUS)
    job = TrainingJob(seq_length=4096, global_batch_size=32)
    profile = load_profile(HARDWARE)
    return estimate_plan(model, cluster, job, plan, profile, options=RECIPE_OPTIONS)


def figures(est: Estimate) -> dict[str, object]:
    """The printed figures of one estimate."""
    return {
        "iteration_time_s": est.iteration_time_s,
        "tokens_per_s": est.tokens_per_s,
        "model_tflops_per_gpu": est.model_tflops_per_gpu,
        "mfu": est.mfu,
        "peak_memory_gib": est.peak_memory_gib,
        "fits": est.fits,
    }


def main() -> None:
    """Price the recipe and print one line per pricing (``--json``: a list of dicts)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    model = get_preset("qwen3-next-80b-a3b")
    rows = []
    for label, plan in (
        ("recipe", recipe_plan()),
        ("no recompute", recipe_plan(recompute=False)),
    ):
        rows.append({"pricing": label, "plan": plan.label(), **figures(price(model, plan))})
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"Qwen3-Next 80B-A3B, Megatron-Bridge v0.6.0 recipe, {GPUS} x {HARDWARE}")
    print(
        f"{'pricing':<14} {'plan':<62} {'s/iter':>7} {'tok/s':>9} {'TFLOP/s':>8} MFU    GiB  fits"
    )
    for r in rows:
        print(
            f"{r['pricing']:<14} {r['plan']:<62} {r['iteration_time_s']:7.3f} "
            f"{r['tokens_per_s']:9.0f} {r['model_tflops_per_gpu']:8.1f} "
            f"{percent(r['mfu']).rjust(6)} {r['peak_memory_gib']:5.1f} {r['fits']}"
        )


if __name__ == "__main__":
    main()
