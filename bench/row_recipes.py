"""What a published row leaves to its recipe: model fields, sharding, allocator, refusals.

`bench/published_rows.py` maps what a row of ``published-runs-dev.csv`` states; this module
adds the model settings the row's source ran but did not print (expert TP, MTP, untied
embeddings, GPT-OSS attention), the sharding of rows whose ``fsdp_or_zero`` names
Megatron-FSDP, the allocator's expandable segments, the rows whose printed configuration is
not their release's recipe, and the rows that cannot be priced as what they ran, each read
from the recipe or the launch script of that source (files cited per entry). The other
recipe settings live beside it: pipeline splits (`pipeline_recipes`), communication
overlap (`overlap_recipes`), memory savers (`saver_recipes`), precision
(`precision_recipes`) and DeepSpeed ZeRO-3 (`zero3_recipes`). Nothing here depends on the
row's published figure.
"""

from __future__ import annotations

import re

from recipe_keys import is_fp8, matches, release_of, row_keys

from specs.model import ModelSpec

EXPERT_TP_ONE_SOURCES = ("MBRIDGE-", "MOEZOO-")
"""Sources whose MoE recipes set ``expert_tensor_parallel_size = 1`` when the row prints no
ETP: Megatron-Bridge ``recipes/qwen/h100/qwen3_moe.py`` and the DeepSeek-V3 workload
base config (``BASE_DEEPSEEK_V3_CONFIG``); the model zoo's ``Qwen3-235B-A22B.yaml``
(``--expert-tensor-parallel-size: 1``)."""

GPT_OSS_FIELDS: dict[str, object] = {
    "activation": "swiglu",
    "normalization": "rmsnorm",
    "position_embedding": "rope",
    "tied_embeddings": False,
    "add_bias_linear": True,
    "attention_sinks": True,
    "sliding_window_every": 2,
}
"""openai/gpt-oss-120b ``config.json`` (as `specs.presets` gpt-oss-120b): biased linear
layers, one sink logit per head, ``layer_types`` alternating sliding (even layers) and full
attention. The window itself is read from the row's ``arch_notes``. Megatron-Bridge's
``GPTOSSProvider`` (``src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py``, tags v0.2.0
to v0.5.0) builds the experts gated (``gated_linear_unit = True``: FC1 of width
2·``moe_ffn_hidden_size``, three weight matrices as `ModelSpec` ``swiglu`` counts them; the
activation is the clamped quick-GELU GLU, priced as the same fused element-wise kernel),
with ``normalization = "RMSNorm"``, rotary positions (``position_embedding_type = "yarn"``)
and ``share_embeddings_and_output_weights = False``."""


UNTIED_MODELS = (("MLM-README-", "gpt "),)
"""(source prefix, model prefix) of the rows whose models have separate input embedding and
output weights (Megatron-LM ``--untie-embeddings-and-output-weights``) though ``arch_notes``
do not say so. Megatron-LM README 2024 table (``images/model_table.png``, f2e5db402c): each
model's name is its parameter count, and only the untied count matches it, e.g. GPT 1.7B:
24·12·2048² + 2·131072·2048 = 1.74e9 (tied: 1.48e9); GPT 7.1B: 30·12·4096² + 2·131072·4096
= 7.11e9 (tied: 6.58e9); GPT 32B: 48·12·7168² + 2·131072·7168 = 31.5e9 (tied: 30.5e9)."""


def untied_embeddings(raw: dict[str, str]) -> bool:
    """True when the row's model unties the embedding and output weights: ``arch_notes``
    say "untied", or the row is in `UNTIED_MODELS`."""
    notes = (raw.get("arch_notes") or "").lower()
    return "untied" in notes or matches(raw, UNTIED_MODELS)


def expert_tp(raw: dict[str, str], model: ModelSpec) -> int | None:
    """ETP of a MoE row: the printed value, else 1 for `EXPERT_TP_ONE_SOURCES`, else None
    (Megatron's default: ETP = TP)."""
    text = (raw.get("etp") or "").strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    if model.num_experts and raw.get("source_id", "").startswith(EXPERT_TP_ONE_SOURCES):
        return 1
    return None


def mtp_layers(raw: dict[str, str]) -> int:
    """Multi-token-prediction layers: one for DeepSeek-V3 rows (``arch_notes``: "MTP 1 layer
    unless stated"; deepseek-ai/DeepSeek-V3 ``num_nextn_predict_layers`` 1), none when the
    row's model says "w/o MTP"."""
    notes = (raw.get("arch_notes") or "").lower()
    model = (raw.get("model") or "").lower()
    if "mtp 1 layer" not in notes or "w/o mtp" in model:
        return 0
    return 1


def sliding_window_fields(raw: dict[str, str]) -> dict[str, object]:
    """GPT-OSS fields of a row whose ``arch_notes`` say "sliding-window (W)" (`GPT_OSS_FIELDS`
    and the window W); empty for other rows."""
    notes = (raw.get("arch_notes") or "").lower()
    found = re.search(r"sliding-window \((\d+)\)", notes)
    if found is None or "gpt oss" not in (raw.get("model") or "").lower():
        return {}
    return {"sliding_window": int(found.group(1)), **GPT_OSS_FIELDS}


def sharding_fields(raw: dict[str, str]) -> dict[str, object] | None:
    """Megatron-FSDP plan fields for a row whose ``fsdp_or_zero`` names Megatron-FSDP, None
    otherwise. Megatron-Bridge's Llama 3 70B / Llama 3.1 405B FSDP recipes shard
    parameters, gradients and optimizer state (``cfg.ddp.data_parallel_sharding_strategy =
    "optim_grads_params"``, ``perf_recipes/llama/gb200/llama3.py``)."""
    lower = (raw.get("fsdp_or_zero") or "").lower()
    if "megatron-fsdp" in lower:
        return {
            "use_megatron_fsdp": True,
            "data_parallel_sharding_strategy": "optim_grads_params",
            "distributed_optimizer": False,
        }
    return None


def refusal(raw: dict[str, str]) -> str | None:
    """Why a row cannot be priced as what it ran, or None: the source itself flags the
    figure as a known performance regression (Megatron-Bridge 26.06.01 GPT-OSS rows,
    ``notes``). (LoRA rows are priced with their recipe's adapters,
    `bench/lora_recipes.py`; DeepSpeed ZeRO-3 rows with DeepSpeed's stage-3 engine,
    `bench/zero3_recipes.py`.)
    """
    notes = (raw.get("notes") or "").lower()
    if "performance regression" in notes and "known issue" in notes:
        return "the source flags the figure as a known performance regression"
    return None


EXPANDABLE_SEGMENTS_RECIPES: tuple[tuple[tuple[str, ...], str, tuple[str, ...], str], ...] = (
    (("25.09", "25.11", "26.02", "26.04"), "llama3.1_405b", ("GB200",), "FP8"),
    (("26.04",), "llama3.1_405b", ("GB300",), "FP8"),
    (("26.04",), "deepseekv3", ("H100", "GB200"), ""),
)
"""(releases, model prefix, GPU prefixes, precision requirement) of the Megatron-Bridge rows
before 26.06 whose launch sets ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``
(`ExecutionOptions.expandable_segments`); "FP8" matches the FP8 recipes (current scaling or
MXFP8, not NVFP4 or BF16), "" any. 25.09 (tag v0.1.0rc4): ``scripts/performance/
setup_experiment.py`` for Llama 3.1 405B on GB200 with ``fp8_recipe`` cs or mx (and
DeepSeek-V3 GB200 BF16 without token drop, which no row runs); 25.11 (v0.2.x) and 26.02
(v0.3.x): ``perf_plugins.py`` ``_set_model_specific_environment_variables`` for
``llama31_405b`` on GB200 with ``fp8_cs``/``fp8_mx`` (26.02 also DeepSeek-V3 on H100, which
no row runs); 26.04 (v0.4.x): the same for GB200 and GB300, and DeepSeek-V3 on H100 and
GB200. From 26.06 (v0.5.0) ``utils/executors.py`` ``PERF_ENV_VARS`` sets it for every run
and ``perf_plugins.py`` removes it for recipes with ``nccl_ub`` or Llama with
Megatron-FSDP (`expandable_segments`)."""


def expandable_segments(raw: dict[str, str]) -> bool:
    """True when the row's Megatron-Bridge launch sets expandable allocator segments
    (`EXPANDABLE_SEGMENTS_RECIPES`; from 26.06 every run but Llama with Megatron-FSDP, the
    only recipes with ``nccl_ub``)."""
    source = raw.get("source_id", "")
    if not source.startswith("MBRIDGE-"):
        return False
    model, gpu, precision = row_keys(raw)
    release = release_of(source)
    if release >= "26.06":
        return not (model.startswith("llama") and sharding_fields(raw) is not None)
    return any(
        release in releases
        and model.startswith(prefix)
        and gpu.startswith(gpus)
        and (needs != "FP8" or is_fp8(precision))
        for releases, prefix, gpus, needs in EXPANDABLE_SEGMENTS_RECIPES
    )


PRINTED_NOT_RECIPE: tuple[tuple[str, str, str, str, str], ...] = (
    (
        "MBRIDGE-26.02.01",
        "llama3_70b",
        "GB300",
        "NVFP4",
        "printed tp1 pp1 at micro-batch 2, the layout of the release's FP8-CS recipe, which "
        "runs it under Megatron-FSDP with 20 layers' activations offloaded "
        "(LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_CS_V2); the NVFP4 recipe runs pp4 vpp5 at "
        "micro-batch 1 (scripts/performance/configs/llama/llama3_workload_base_configs.py "
        "LLAMA3_70B_PRETRAIN_CONFIG_GB300_NVFP4_V2, tags v0.3.0 and v0.3.1), as the 26.02 "
        "and 26.04 rows of the same recipe print",
    ),
    (
        "MBRIDGE-26.02.01",
        "llama3_70b",
        "GB300",
        "MXFP8",
        "printed pp4 without vpp at micro-batch 2; the release's recipe runs pp4 vpp5 at "
        "micro-batch 1 (scripts/performance/configs/llama/llama3_workload_base_configs.py "
        "LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_MX_V2, tags v0.3.0 and v0.3.1), as the 26.02 "
        "and 26.04 rows of the same recipe print",
    ),
    (
        "MBRIDGE-25.09",
        "llama3_70b",
        "GB200",
        "ALTERNATIVE",
        "printed micro-batch 2 beside the parenthesised MXFP8 layout tp2 pp4 vpp5; the "
        "release's recipe runs that layout at micro-batch 1 (scripts/performance/configs/"
        "llama3/llama3_70b_llm_pretrain.yaml, gb200 fp8_mx mbs 1, tag v0.1.0rc4); micro-batch "
        "2 is the recipe's value for the FP8-CS Megatron-FSDP alternative",
    ),
    (
        "MBRIDGE-25.11",
        "gpt oss",
        "B200",
        "BF16",
        "printed EP 8; the release's recipe runs EP 64 (scripts/performance/configs/gpt_oss/"
        "workload_base_configs.py GPT_OSS_120B_B200_BF16_BASE_CONFIG, tag v0.2.0), and the "
        "published 3.99 s over 2 microbatches is 2.00 s per microbatch, as the 26.02 EP 64 "
        "B200 row's 10.18 s over 5 (2.04 s), against 1.19 s for 26.02.01's EP 8",
    ),
)
"""(source, model prefix, GPU prefix, printed precision prefix, reason) of the rows whose
printed parallel configuration differs from the recipe their release ships. They are
priced as printed (a row's stated plan is what the bench prices); the reason is given when
such a row is predicted not to fit (`recipe_mismatch`)."""


def recipe_mismatch(raw: dict[str, str]) -> str | None:
    """Why the row's printed configuration is not its release's recipe
    (`PRINTED_NOT_RECIPE`), or None."""
    source = raw.get("source_id", "")
    model, gpu, precision = row_keys(raw)
    for row_source, prefix, gpu_prefix, printed, reason in PRINTED_NOT_RECIPE:
        if (
            source == row_source
            and model.startswith(prefix)
            and gpu.startswith(gpu_prefix)
            and precision.startswith(printed)
        ):
            return reason
    return None
