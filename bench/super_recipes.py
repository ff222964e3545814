"""Nemotron 3 Super rows: what Megatron-Bridge's performance configs ran beyond the printed
plan (`super_runtime_fields`, `super_plan_fields`, `super_model_fields`).

The model is the ``nemotron-3-super`` preset (`specs.preset_hybrid`: the Hugging Face
config of nvidia/NVIDIA-Nemotron-3-Super-120B-A12B that the recipes load through
``AutoBridge``; latent MoE and a repeated two-depth MTP block). The dev set prints its rows
without architecture columns.

Recipes (NVIDIA-NeMo/Megatron-Bridge ``scripts/performance/configs/nemotronh/``,
``nemotron_3_workload_base_configs.py`` and ``nemotron_3_llm_pretrain.py``; releases by tag
as `norm_recipes`: 26.04 = v0.4.0, 26.04.01 = branch llmb-r0.4.1 (the same Super configs),
26.06 = v0.5.0 (the same for the GPUs the rows print), 26.06.01 = v0.5.1, which changes
B200 BF16 alone; v0.3.x ships no Super config):

- ``BASE_NEMOTRON_3_SUPER_CONFIG``: 64 GPUs, global batch 512, micro-batch 1, tp 1, etp 1,
  ep 64, ``moe_flex_dispatcher_backend="hybridep"`` (the flex dispatcher) and
  ``cuda_graph_impl="transformer_engine"`` with ``cuda_graph_scope=["attn", "mamba",
  "moe_router", "moe_preprocess"]``; GB200 (and VR200) tp 2.
- B300: ep 8; BF16 and NVFP4 recompute ``moe_act`` and ``layernorm``.
- B200 (``BASE_NEMOTRON_3_SUPER_CONFIG_B200``): ep 64, no CUDA graphs
  (``cuda_graph_impl="none"``), recompute ``moe_act`` and ``layernorm``; BF16 adds ``moe``
  and ``core_attn``; NVFP4 runs tp 2 with the graphs of the base config and no recompute.
  v0.5.1's BF16 runs tp 2, ep 8, graphs, and recomputes ``moe_act``, ``layernorm`` and
  ``core_attn``.
- Every config (``set_nemotron_3_super_common_configs``; base recipe
  ``recipes/nemotronh/nemotron_3_super.py`` ``nemotron_3_super_pretrain_config``): bf16
  gradient reduction, balanced routing (``moe_router_force_load_balancing``), the
  distributed optimizer with both overlaps, MTP at two depths of one repeated layer.

HEAD's H100 config (067f987d, 26.08: ``perf_recipes/nemotronh/h100/nemotronh.py``
``nemotron_3_super_pretrain_64gpu_h100_bf16_config`` on the library recipe
``recipes/nemotronh/h100/nemotron_3_super.py``
``_nemotron_3_super_pretrain_64gpu_h100_bf16_config``): 64 H100, sequence 4096, global batch
1280, tp 1, pp 2, ep 32, BF16, the flex dispatcher (HybridEP) with a fixed expert capacity
(``moe_expert_capacity_factor = 1.10``, ``moe_pad_expert_input_to_capacity``), no CUDA
graphs, selective recompute of ``layernorm``, ``moe_act``, ``moe`` and ``core_attn``, the
precision-aware optimizer with fp16 master weights and bf16 moments and gradients, and
neither gradient nor parameter overlap (``SUPER_H100``).

NVFP4's last 14 layers in bf16 (``first_last_layers_bf16``) are priced, from
`precision_recipes.BF16_LAYER_RECIPES`. Not expressed, so not priced: the MTP block kept in
bf16 under FP8 and NVFP4 (``keep_mtp_spec_in_bf16``), NVFP4's quantization file
(``te_quant.cfg``: QKV, attention projection and latent projections in bf16, the Mamba-2
output projection in MXFP8), and the router's padding for quantization.
"""

from __future__ import annotations

from recipe_keys import is_fp8, release_of

SUPER_MODELS = ("nemotron_3_super", "nemotron-3-super", "nemotron 3 super")
"""Model names (lower case, prefix) of Nemotron 3 Super rows."""
SUPER_PRESET = "nemotron-3-super"

SUPER_SCOPES = frozenset({"attn", "mamba", "moe_router", "moe_preprocess"})
"""``BASE_NEMOTRON_3_SUPER_CONFIG``'s CUDA graphs."""
SUPER_FIRST_RELEASE = "26.04"
"""The first Megatron-Bridge release with Nemotron 3 Super configs (v0.4.0)."""
B200_BF16_CHANGED = "26.06.01"
"""The container whose B200 BF16 config differs (v0.5.1, module docstring)."""


SUPER_H100_RELEASE = "26.08"
"""The release of the H100 config (HEAD's)."""
SUPER_H100_CAPACITY = 1.10
"""HEAD's H100 ``moe_expert_capacity_factor``, padded to capacity."""
SUPER_H100_PLAN: dict[str, object] = {
    "recompute": "selective",
    "recompute_modules": ("layernorm", "moe_act", "moe", "core_attn"),
    "overlap_grad_reduce": False,
    "overlap_param_gather": False,
}
"""HEAD's H100 `ParallelPlan` fields beyond the printed plan (module docstring)."""
SUPER_H100_OPTIONS: dict[str, object] = {
    "moe_dispatcher": "flex",
    "cuda_graph_scopes": frozenset(),
    "precision_aware_optimizer": True,
    "main_params_dtype": "fp16",
    "exp_avg_dtype": "bf16",
    "exp_avg_sq_dtype": "bf16",
}
"""HEAD's H100 `ExecutionOptions` fields (module docstring; bf16 main gradients are
`row_options.MEGATRON_BRIDGE_PERF`'s)."""


def _h100_head(container: str, gpu: str) -> bool:
    """Whether the row runs HEAD's H100 config."""
    return gpu.startswith("H100") and release_of(container) >= SUPER_H100_RELEASE


def super_model_fields(container: str, gpu: str) -> dict[str, object]:
    """`ModelSpec` fields a Nemotron 3 Super row's config sets: HEAD's H100 capacity
    factor (`SUPER_H100_CAPACITY`); empty for the other configs (dropless)."""
    return {"moe_capacity_factor": SUPER_H100_CAPACITY} if _h100_head(container, gpu) else {}


def _key(gpu: str, precision: str) -> tuple[str, str]:
    """(GPU family, precision family) of a row: ``B200``, ``B300``, ``GB200``, ``GB300``
    and ``BF16``, ``FP8``, ``NVFP4``."""
    family = gpu.split()[0] if gpu else ""
    if precision.startswith("NVFP4"):
        return family, "NVFP4"
    return family, "FP8" if is_fp8(precision) else "BF16"


def super_runtime_fields(container: str, gpu: str, precision: str) -> dict[str, object]:
    """`ExecutionOptions` fields of a Nemotron 3 Super row's config: the flex dispatcher,
    and the CUDA graph scopes (none on B200 but NVFP4 and v0.5.1's BF16)."""
    if _h100_head(container, gpu):
        return dict(SUPER_H100_OPTIONS)
    family, dtype = _key(gpu, precision)
    graphs = family != "B200" or dtype == "NVFP4" or _b200_bf16_v051(container, family, dtype)
    return {"moe_dispatcher": "flex", "cuda_graph_scopes": SUPER_SCOPES if graphs else frozenset()}


def super_plan_fields(container: str, gpu: str, precision: str) -> dict[str, object]:
    """`ParallelPlan` fields of a Nemotron 3 Super row's config beyond its printed columns:
    the selective recompute modules of B300 and B200, and HEAD's H100 settings
    (`SUPER_H100_PLAN`; module docstring)."""
    if _h100_head(container, gpu):
        return dict(SUPER_H100_PLAN)
    family, dtype = _key(gpu, precision)
    modules: tuple[str, ...] = ()
    if family == "B300" and dtype in ("BF16", "NVFP4"):
        modules = ("moe_act", "layernorm")
    elif _b200_bf16_v051(container, family, dtype):
        modules = ("moe_act", "layernorm", "core_attn")
    elif family == "B200" and dtype == "BF16":
        modules = ("moe_act", "moe", "layernorm", "core_attn")
    elif family == "B200" and dtype == "FP8":
        modules = ("moe_act", "layernorm")
    if not modules:
        return {}
    return {"recompute": "selective", "recompute_modules": modules}


def _b200_bf16_v051(container: str, family: str, dtype: str) -> bool:
    """Whether the row runs v0.5.1's B200 BF16 config."""
    return family == "B200" and dtype == "BF16" and container >= B200_BF16_CHANGED
