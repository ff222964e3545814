"""Megatron-Bridge's H100 pretraining performance recipes, release by release, as configured.

Each `H100Recipe` is one configuration (parallel sizes, batch, precision) and the settings
its recipe ran beyond the columns a performance table prints (recompute, CUDA graphs,
token dispatcher, all-to-all overlap, pipeline layout, token drop). Entries cite the tag
and file of NVIDIA-NeMo/Megatron-Bridge they come from; identical configurations of
several releases are one entry. Only configurations are read here, never a published
throughput. Release ids are the NeMo containers: 25.09 = tag v0.1.0rc4 (``scripts/
performance/configs/*/*_llm_pretrain.yaml``, ``perf_matrix: h100``, with ``run_script.py``),
25.11 = v0.2.0 (``configs/*/workload_base_configs.py``, ``*_H100_*_BASE_CONFIG``), 26.02 =
v0.3.0, 26.04 = v0.4.0, 26.06 = v0.5.0 (``configs/*/*_workload_base_configs.py``,
``*_PRETRAIN_CONFIG_H100_*``), 26.08 = HEAD 067f987d / v0.6.0 (``src/megatron/bridge/
perf_recipes/*/h100/*.py``, functions ``*_pretrain_*gpu_h100_*_config``; its model
verification cards name 26.08 containers).

Common to every release (`row_options.MEGATRON_BRIDGE_PERF` and the FP8 weight rule
`precision_recipes.fp8_weight_fields`): distributed optimizer, overlapped gradient reduction and
parameter gather, bf16 gradient reduction, TE cross entropy; FP8 current scaling with FP8
parameter gather (``_perf_precision("fp8_cs")``, ``mixed_precision.py``).

The configurations are three tables, `h100_recipe_dense.DENSE_RECIPES` (Llama),
`h100_recipe_moe.MOE_RECIPES` (mixture-of-experts models) and
`h100_recipe_hybrid.HYBRID_RECIPES` (hybrid Mamba-2 models: Nemotron 3 Nano, Nemotron-H
56B), over the record and shared settings of `h100_recipe_schema`; `RECIPES` is the three
in that order.

Not covered (`NOT_EXPRESSIBLE`, `SKIPPED`): models without a preset, and fine-tuning,
vision-language and diffusion recipes.
"""

from __future__ import annotations

from h100_recipe_dense import DENSE_RECIPES
from h100_recipe_hybrid import HYBRID_RECIPES
from h100_recipe_moe import MOE_RECIPES
from h100_recipe_schema import H100Recipe

RECIPES: tuple[H100Recipe, ...] = (*DENSE_RECIPES, *MOE_RECIPES, *HYBRID_RECIPES)
"""Every H100 pretraining configuration of a model with a preset (module docstring)."""

NOT_EXPRESSIBLE: tuple[tuple[str, str, str], ...] = (
    (
        "Nemotron 3.5 Lightning",
        "HEAD perf_recipes/nemotronh/h100/nemotronh.py nemotron_3_5_lightning_pretrain_16gpu_"
        "h100_*_config",
        "no preset: Nemotron 3.5 Lightning's Hugging Face config (nvidia/NVIDIA-Nemotron-3.5-"
        "Lightning-30B-A3B-BF16), which its recipe loads, is not read here",
    ),
    (
        "Qwen3-Next 80B-A3B",
        "v0.2.0-v0.5.0 QWEN3_NEXT_80B_A3B_*H100_*",
        "gated DeltaNet linear-attention layers (no preset)",
    ),
    (
        "GLM-5",
        "HEAD perf_recipes/glm_moe_dsa/h100/glm5.py",
        "DeepSeek sparse attention (no preset)",
    ),
    (
        "DeepSeek-V3 on 64 H100",
        "HEAD perf_recipes/deepseek/h100/deepseek_v3.py deepseek_v3_pretrain_64gpu_h100_*_config",
        "tp 2, pp 8 and ep 64 need at least 512 GPUs (64 / (pp 8 x ep 64) < 1 expert data-"
        "parallel rank); the recipe keeps the 1024-GPU layout under a 64-GPU name",
    ),
    (
        "GPT-OSS 120B FP8-MX",
        "v0.4.0 GPT_OSS_120B_PRETRAIN_CONFIG_H100_FP8_MX_*",
        "MXFP8 on H100 (no MXFP8 tensor cores on Hopper; not priced)",
    ),
)
"""(model, configs, reason) of H100 pretraining recipes not priced."""

SKIPPED = (
    "SFT and LoRA (llama3 *_H100_SFT_* / *_LORA_*, perf_recipes llama3_*_sft_* / *_peft_*)",
    "vision-language (qwen_vl: Qwen3-VL, Qwen3.5-VL)",
    "diffusion (wan: WAN_14B_PRETRAIN_CONFIG_H100_BF16_V1, perf_recipes/wan/h100)",
    "DeepSeek-V3 FP8-SC large-scale config of v0.3.0 (the vp 4 layout at global batch 1024: "
    "the FP8-CS V1 layout priced above)",
)
"""Recipes left out by the brief's scope: pretraining only."""
