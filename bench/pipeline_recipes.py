"""The pipeline splits a published row leaves to its recipe: account-for flags and layouts.

`bench/row_recipes.py` holds the other settings a row's source ran but did not print; this
module holds the pipeline split, read from the recipe or the launch script of the row's
source (files cited per entry). Nothing here depends on the row's published figure.

Pipeline splits (Megatron semantics in `specs.pipeline_split`):
- Megatron-Bridge Llama 3.1 405B and Qwen3 235B-A22B, and the Megatron-MoE model zoo's
  Qwen3 235B-A22B: the embedding and the loss each count as one layer
  (``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``):
  NVIDIA-NeMo/Megatron-Bridge ``src/megatron/bridge/recipes/llama/h100/llama3.py``
  (``llama31_405b_pretrain_256gpu_h100_bf16_config``, the base of every
  ``perf_recipes/llama/*/llama31.py``) and ``recipes/qwen/h100/qwen3_moe.py``
  (``qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config``), both flags set since release
  v0.2.0 (25.11); yanring/Megatron-MoE-ModelZoo ``model_configs/benchmarking/
  Qwen3-235B-A22B.yaml``.
- Megatron-Bridge DeepSeek-V3 and Kimi-K2: an explicit layout per (pp, vpp)
  (``recipes/deepseek/h100/deepseek_v3.py`` ``_get_deepseek_v3_pipeline_layout``,
  ``recipes/kimi/h100/kimi_k2.py`` ``_get_kimi_k2_pipeline_layout``, and the GB300
  recipes' ``"Et*4|(t*4|)*14tmL"``). Every entry of those tables has the same shape over
  S = pp·vpp virtual stages: the embedding plus ceil(L/S) layers on the first stage,
  ceil(L/S) on each middle stage, the remaining layers with the MTP layers and the loss on
  the last; `recipe_layout` builds that shape for any S.
- BLOOM-176B (Megatron-DeepSpeed ``--pp-partition-method 'type:transformer|embedding'``):
  the tied embedding counts as one layer on the first and on the last stage, which is
  Megatron's pair of account-for flags.
"""

from __future__ import annotations

import math

from recipe_keys import ALL_RELEASES, NotExpressible, is_fp8, matches, release_of, row_keys

from specs.model import ModelSpec

ACCOUNT_FOR_BOTH = (
    ("MBRIDGE-", "llama3.1_405b"),
    ("MBRIDGE-", "qwen3_235b"),
    ("MOEZOO-", "qwen3-235b"),
    ("BLOOM-", "bloom-176b"),
)
"""(source prefix, model prefix) of the rows whose recipe counts the embedding and the loss
as pipeline layers (module docstring)."""

LAYOUT_MODELS = (("MBRIDGE-", "deepseekv3"), ("MBRIDGE-", "kimi_k2"))
"""(source prefix, model prefix) of the rows whose recipe gives an explicit layout."""


def recipe_layout(num_layers: int, stages: int, mtp_layers: int) -> str:
    """Megatron-Bridge's DeepSeek-V3 / Kimi-K2 layout shape over ``stages`` virtual stages
    (module docstring): ``E`` + ceil(L/S) ``t`` first, ceil(L/S) ``t`` per middle stage,
    the rest + ``m`` x mtp + ``L`` last (NotExpressible when nothing is left for the last
    stage: the recipes have no layout for such S). E.g. L=61, S=16, one MTP layer:
    ``Et*4|(t*4|)*14tmL`` (the GB300 recipe's string)."""
    per = math.ceil(num_layers / stages)
    last = num_layers - per * (stages - 1)
    if last < 1:
        raise NotExpressible(f"no recipe layout of {num_layers} layers over {stages} stages")
    middle = "".join("t" * per + "|" for _ in range(stages - 2))
    return "E" + "t" * per + "|" + middle + "t" * last + "m" * mtp_layers + "L"


THIRTY_TWO_STAGE_LAYOUT = "Et|(tt|)*30{mtp}L"
"""Megatron-Bridge's layout of the 61-layer DeepSeek-V3 and Kimi-K2 over 32 virtual stages,
where `recipe_layout`'s shape leaves the last stage no layer: the embedding and one layer
first, two layers on each of the 30 middle stages, the MTP layers (``{mtp}``) and the loss
alone last. DeepSeek-V3 H100 pp 8 vpp 4: ``"Et|(tt|)*30mL"`` (tag v0.1.0rc4
``scripts/performance/run_script.py``; v0.3.0 to v0.5.0 ``scripts/performance/configs/
deepseek/deepseek_workload_base_configs.py`` ``DEEPSEEK_V3_PRETRAIN_CONFIG_H100_*``
``pp_layout``; HEAD ``src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py``);
Kimi-K2 H100 pp 16 vpp 2: ``"Et|(tt|)*30L"`` (v0.4.0, v0.5.0 ``configs/kimi/
kimi_workload_base_configs.py`` ``KIMI_K2_PRETRAIN_CONFIG_H100``; HEAD
``perf_recipes/kimi/h100/kimi_k2.py``)."""


def layout_for(num_layers: int, stages: int, mtp_layers: int, gpu: str) -> str:
    """The recipes' layout over ``stages`` virtual stages: `THIRTY_TWO_STAGE_LAYOUT` for 61
    layers over 32 stages on H100 (the GPU of the recipes that set it; a row of another GPU
    printed with 32 stages runs no recipe of its release and stays unpriced),
    `recipe_layout`'s shape otherwise."""
    if (num_layers, stages) == (61, 32) and gpu.startswith("H100"):
        return THIRTY_TWO_STAGE_LAYOUT.format(mtp="m" * mtp_layers)
    return recipe_layout(num_layers, stages, mtp_layers)


LLAMA3_70B_H100_FP8_LAYOUT = "Et*2|(t*2|)*34,t*3|(t*2|)*3,tL"
"""Megatron-Bridge HEAD's Llama 3 70B H100 FP8 recipe at pp 8 vpp 5 (``src/megatron/bridge/
perf_recipes/llama/h100/llama3.py`` ``llama3_70b_pretrain_64gpu_h100_fp8cs_config``,
``pipeline_model_parallel_layout``): the embedding with two layers first, three layers on
the 36th virtual stage, one with the loss last; 26.06 and earlier split evenly."""


def _llama3_70b_h100_fp8_head(raw: dict[str, str], pp: int, vpp: int) -> bool:
    model, gpu, precision = row_keys(raw)
    source = raw.get("source_id", "")
    return (
        source.startswith("MBRIDGE-")
        and release_of(source) > ALL_RELEASES[-1]
        and model.startswith("llama3_70b")
        and gpu.startswith("H100")
        and is_fp8(precision)
        and (pp, vpp) == (8, 5)
    )


def pipeline_fields(raw: dict[str, str], model: ModelSpec, pp: int, vpp: int) -> dict[str, object]:
    """The `ParallelPlan` pipeline-split fields the row's recipe sets (module docstring);
    empty for pp = 1 and for rows whose recipe splits evenly."""
    if pp == 1:
        return {}
    if matches(raw, ACCOUNT_FOR_BOTH):
        return {
            "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True,
        }
    if matches(raw, LAYOUT_MODELS):
        gpu = (raw.get("gpu_type") or "").strip().upper()
        layout = layout_for(model.num_layers, pp * vpp, model.mtp_num_layers, gpu)
        return {"pipeline_model_parallel_layout": layout}
    if _llama3_70b_h100_fp8_head(raw, pp, vpp):
        return {"pipeline_model_parallel_layout": LLAMA3_70B_H100_FP8_LAYOUT}
    return {}
