"""The precision settings a published row leaves to its recipe: FP8 and NVFP4 weights, the
layers kept in bf16, gradients, Adam.

FP8 and NVFP4 weight storage and gathers, the element size of the gradient reduction and the dtypes
of Adam's state, each read from the recipe or the launch script of the row's source (files
cited per entry). Nothing here depends on the row's published figure.
"""

from __future__ import annotations

from norm_recipes import compute_dtype
from recipe_keys import is_fp8, matches, release_of, row_keys

FP8_PARAM_OFF: tuple[tuple[str, str], ...] = (("MBRIDGE-26.06", "gpt oss"),)
"""(source prefix, model prefix) of FP8 rows whose recipe turns FP8 parameters off:
Megatron-Bridge v0.5.0 (26.06) builds every GPT-OSS precision config through
``get_gpt_oss_20b_precision_config`` (``scripts/performance/configs/gpt_oss/
gpt_oss_llm_pretrain.py``: ``fp8_param = fp8_param_gather = False``)."""


def fp8_weight_fields(raw: dict[str, str]) -> dict[str, object]:
    """`ExecutionOptions` FP8 weight fields of an FP8 row's recipe; empty for other rows.

    - Megatron-Bridge: every release's FP8 precision configs (``bf16_with_fp8_delayed_
      scaling_mixed``, ``bf16_with_fp8_current_scaling_mixed``, ``bf16_with_mxfp8_mixed`` in
      ``src/megatron/bridge/training/mixed_precision.py``, tags v0.1.0rc4 to v0.5.x, used by
      ``get_precision_config`` and ``_perf_precision``) set ``fp8_param_gather = True``
      (MXFP8 with ``reuse_grad_buf_for_mxfp8_param_ag``), except `FP8_PARAM_OFF`. The
      recipe is MXFP8 for rows printed MXFP8, FP8-MX or with the "alternative quantization
      granularity" (MXFP8 on GB200/B200), per-tensor current scaling otherwise (FP8,
      FP8-CS, and the 25.09 "not stated" main value).
    - Megatron-MoE model zoo: ``sbatch_benchmarking.sh`` runs ``--fp8-recipe mxfp8
      --fp8-param-gather --reuse-grad-buf-for-mxfp8-param-ag`` without optimizer offload.
    """
    source = raw.get("source_id", "")
    precision = (raw.get("precision") or "").strip().upper()
    if not source.startswith(("MBRIDGE-", "MOEZOO-")) or not is_fp8(precision):
        return {}
    mxfp8 = precision.startswith(("MXFP8", "FP8-MX", "ALTERNATIVE"))
    return {
        "fp8_recipe": "mxfp8" if mxfp8 else "tensorwise",
        "fp8_param": not matches(raw, FP8_PARAM_OFF),
    }


BF16_LAYER_RECIPES: tuple[tuple[str, str, str, int, int], ...] = (
    ("26.04", "nemotron_3_super", "NVFP4", 0, 14),
    ("26.06", "gpt oss", "NVFP4", 0, 4),
)
"""(first Megatron-Bridge release, model prefix, printed precision prefix, first, last) of
the rows whose performance recipe keeps decoder layers in bf16
(`costmodel.execution.ExecutionOptions.first_last_layers_bf16` with those counts):

- Nemotron 3 Super NVFP4, from 26.04 on: v0.4.0 ``scripts/performance/configs/nemotronh/
  nemotron_3_llm_pretrain.py`` ``set_nemotron_3_super_common_configs`` sets
  ``mixed_precision.first_last_layers_bf16 = True`` and ``num_layers_at_end_in_bf16 = 14``
  (``num_layers_at_start_in_bf16`` stays ``MixedPrecisionConfig``'s 0); branch llmb-r0.4.1
  (26.04.01), v0.5.0 (26.06) and v0.5.1 (26.06.01) replace the precision config with
  ``nemotron_3_super_bf16_with_nvfp4_mixed`` (``src/megatron/bridge/training/
  mixed_precision.py``: the same two settings) in that function. The 14 count the model's
  hybrid layers (Megatron-core's hybrid block passes each layer's global index to
  ``get_fp4_context``).
- GPT-OSS NVFP4, from 26.06 on: v0.5.0 and v0.5.1 ``scripts/performance/configs/gpt_oss/
  gpt_oss_llm_pretrain.py`` ``get_gpt_oss_20b_precision_config`` (every GPT-OSS config's)
  sets ``first_last_layers_bf16 = True``, ``num_layers_at_start_in_bf16 = 0``,
  ``num_layers_at_end_in_bf16 = 4`` for ``nvfp4``; v0.4.0 has no such setting.

No other release, model or precision sets them: the FP8 current-scaling config
``bf16_with_fp8_current_scaling_mixed`` keeps one layer at each end, which
``scripts/performance/utils/precision.py`` ``get_precision_config`` turns off for
``fp8_cs`` (tags v0.2.0 to v0.6.0, ``utils/helpers.py`` at v0.1.0rc4); the MXFP8 and
NVFP4 configs (``bf16_with_mxfp8_mixed``, ``bf16_with_nvfp4_mixed``) never set them, and
``update_config_with_precision_overrides`` writes the precision config's False over the
Nemotron-H providers' ``first_last_layers_bf16 = True``. Llama 3's library recipe keeps the
last 4 layers of its 8B NVFP4 run in bf16 (``src/megatron/bridge/recipes/llama/llama3.py``),
but the performance configs replace its precision config with ``get_precision_config``'s.
GPT-OSS's 26.06 MXFP8 config sets ``first_last_layers_bf16 = False``."""


def bf16_layer_fields(raw: dict[str, str]) -> dict[str, object]:
    """`ExecutionOptions` fields of the layers a Megatron-Bridge row's recipe keeps in bf16
    (`BF16_LAYER_RECIPES`); empty for other rows."""
    source = raw.get("source_id", "")
    if not source.startswith("MBRIDGE-"):
        return {}
    model, _, precision = row_keys(raw)
    for first, prefix, printed, start, end in BF16_LAYER_RECIPES:
        recipe = model.startswith(prefix) and precision.startswith(printed)
        if recipe and release_of(source) >= first:
            return {
                "first_last_layers_bf16": True,
                "num_layers_at_start_in_bf16": start,
                "num_layers_at_end_in_bf16": end,
            }
    return {}


FP4_PARAM_FROM = "26.06"
"""The first Megatron-Bridge release whose ``bf16_with_nvfp4_mixed`` sets
``fp4_param_gather = True`` (``src/megatron/bridge/training/mixed_precision.py``: absent at
tags v0.3.0 and v0.4.0, set from v0.5.0, the 26.06 container's tag)."""


FP4_PARAM_OFF: tuple[tuple[str, str], ...] = (
    ("MBRIDGE-", "nemotron_3_super"),
    ("MBRIDGE-", "deepseekv3"),
    ("MBRIDGE-", "gpt oss"),
)
"""(source prefix, model prefix) of the Megatron-Bridge NVFP4 recipes that turn
``fp4_param_gather`` off again after `FP4_PARAM_FROM` (tags v0.5.0 and v0.5.1,
``scripts/performance/configs/``): ``nemotronh/nemotron_3_llm_pretrain.py``
``set_nemotron_3_super_common_configs`` ("Disabled until MCore PR 4358 lands"),
``deepseek/deepseek_llm_pretrain.py`` (every DeepSeek-V3 config) and
``gpt_oss/gpt_oss_llm_pretrain.py`` (``fp4_param`` and ``fp4_param_gather`` both False)."""


def fp4_weight_fields(raw: dict[str, str]) -> dict[str, object]:
    """`ExecutionOptions` NVFP4 weight field of a Megatron-Bridge NVFP4 row's recipe
    (``fp4_param``: NVFP4 parameters gathered in NVFP4 from `FP4_PARAM_FROM` on unless the
    model's recipe turns it off (`FP4_PARAM_OFF`), bf16 parameters with Transformer Engine's
    cached NVFP4 copies otherwise); empty for other rows."""
    source = raw.get("source_id", "")
    if not source.startswith("MBRIDGE-") or compute_dtype(raw) != "nvfp4":
        return {}
    return {"fp4_param": release_of(source) >= FP4_PARAM_FROM and not matches(raw, FP4_PARAM_OFF)}


NVFP4_FUSED_RHT_FROM = "26.04"
"""The first Megatron-Bridge release whose Transformer Engine writes both NVFP4 copies of an
operand in one kernel (``nvte_quantize_with_hadamard_transform``, TE commit 523801df, first
in tag v2.14): v0.4.0 (26.04) pins TE 71bbefbf and v0.5.0 (26.06) 4220403e, both with it;
v0.3.0 and v0.3.1 (26.02, 26.02.01) pin 5671fd36 (v2.12), whose
``NVFP4Quantizer::quantize_impl`` runs the row-wise and the Hadamard column-wise casts as two
kernels (``pyproject.toml`` ``transformer-engine @ git+...``)."""


def nvfp4_cast_fields(raw: dict[str, str]) -> dict[str, object]:
    """`ExecutionOptions.nvfp4_fused_rht_cast` of a Megatron-Bridge NVFP4 row: True from
    `NVFP4_FUSED_RHT_FROM` on, False before; empty for other rows."""
    source = raw.get("source_id", "")
    if not source.startswith("MBRIDGE-") or compute_dtype(raw) != "nvfp4":
        return {}
    return {"nvfp4_fused_rht_cast": release_of(source) >= NVFP4_FUSED_RHT_FROM}


BF16_GRAD_SYNC: tuple[tuple[str, str], ...] = (("NEMO-LONGSEQ", "llama2"),)
"""(source prefix, model prefix) of NeMo 1.x FP8 rows whose launch reduces gradients in
bf16: the NeMo-Framework-Launcher H100 FP8 example for Llama 2 7B
(``examples/training/llama/h100/llama2_7b_fp8.sh``, commit 7d6e2df) runs
``training=llama/llama2_7b`` (``launcher_scripts/conf/training/llama/llama2_7b.yaml``:
``optim.name: distributed_fused_adam``, ``megatron_amp_O2: true``,
``contiguous_grad_buffer: true``) with ``+training.model.optim.grad_sync_dtype=bf16``.
NeMo's ``MegatronDistributedFusedAdam`` (``nemo/core/optim/distributed_adam.py``) is Apex's
``DistributedFusedAdam``, whose contiguous gradient buffer has ``grad_sync_dtype``
elements (``apex/contrib/optimizers/distributed_fused_adam.py`` ``_init_grad_buffer``):
2 bytes per gradient element (`costmodel.execution.ExecutionOptions.main_grad_bytes`).
The NeMo long-sequence page (NeMo 24.03.01 container) prints no optimizer settings; its
LLAMA2-7B FP8 rows take that example's."""


def grad_sync_fields(raw: dict[str, str]) -> dict[str, object]:
    """``main_grad_bytes`` 2 for the FP8 rows of `BF16_GRAD_SYNC`; empty for other rows."""
    if not is_fp8(raw.get("precision") or "") or not matches(raw, BF16_GRAD_SYNC):
        return {}
    return {"main_grad_bytes": 2}


PRECISION_AWARE_OPTIMIZER: dict[str, object] = {
    "precision_aware_optimizer": True,
    "exp_avg_dtype": "bf16",
    "exp_avg_sq_dtype": "bf16",
}
"""The Megatron-MoE model zoo's FP8 and MXFP8 runs: ``sbatch_benchmarking.sh`` (yanring/
Megatron-MoE-ModelZoo @ e8650517) adds ``--use-precision-aware-optimizer --main-grads-dtype
fp32 --main-params-dtype fp32 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16`` for
``PR=fp8`` (line 90) and ``PR=mxfp8`` (line 105), not for ``PR=bf16`` (lines 94-96); fp32
main gradients and main params are the defaults (`costmodel.execution.ExecutionOptions`
``precision_aware_optimizer``, ``exp_avg_dtype``, ``exp_avg_sq_dtype``)."""


def optimizer_precision_fields(raw: dict[str, str]) -> dict[str, object]:
    """`PRECISION_AWARE_OPTIMIZER` for the model zoo's FP8 and MXFP8 rows; empty for other
    rows."""
    if not raw.get("source_id", "").startswith("MOEZOO-"):
        return {}
    if not is_fp8(raw.get("precision") or ""):
        return {}
    return dict(PRECISION_AWARE_OPTIMIZER)
