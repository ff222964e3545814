"""What a published row leaves to its recipe: pipeline splits, expert TP, MTP, sharding.

`bench/published_rows.py` maps what a row of ``published-runs-dev.csv`` states; this module
adds the settings the row's source ran but did not print, each read from the recipe or the
launch script of that source (files cited per entry), and the sharding of rows whose
``fsdp_or_zero`` names Megatron-FSDP or ZeRO-3. Nothing here depends on the row's
published figure.

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
import re

from specs.model import ModelSpec


class NotExpressible(Exception):
    """A row field that the specs or the stored profiles cannot express yet."""


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


def _matches(raw: dict[str, str], table: tuple[tuple[str, str], ...]) -> bool:
    source = raw.get("source_id", "")
    model = raw.get("model", "").strip().lower()
    return any(source.startswith(s) and model.startswith(m) for s, m in table)


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
    model, gpu, precision = _row_keys(raw)
    source = raw.get("source_id", "")
    return (
        source.startswith("MBRIDGE-")
        and _release(source) > ALL_RELEASES[-1]
        and model.startswith("llama3_70b")
        and gpu.startswith("H100")
        and _is_fp8(precision)
        and (pp, vpp) == (8, 5)
    )


def pipeline_fields(raw: dict[str, str], model: ModelSpec, pp: int, vpp: int) -> dict[str, object]:
    """The `ParallelPlan` pipeline-split fields the row's recipe sets (module docstring);
    empty for pp = 1 and for rows whose recipe splits evenly."""
    if pp == 1:
        return {}
    if _matches(raw, ACCOUNT_FOR_BOTH):
        return {
            "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True,
        }
    if _matches(raw, LAYOUT_MODELS):
        gpu = (raw.get("gpu_type") or "").strip().upper()
        layout = layout_for(model.num_layers, pp * vpp, model.mtp_num_layers, gpu)
        return {"pipeline_model_parallel_layout": layout}
    if _llama3_70b_h100_fp8_head(raw, pp, vpp):
        return {"pipeline_model_parallel_layout": LLAMA3_70B_H100_FP8_LAYOUT}
    return {}


GRAD_REDUCE_NOT_OVERLAPPED: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("deepseekv3", "H100", ("25.09", "26.08")),
    ("kimi_k2", "H100", ("26.04", "26.06", "26.08")),
)
"""(model prefix, GPU prefix, releases) of the Megatron-Bridge rows whose recipe reduces
gradients after the backward pass (``overlap_grad_reduce = False``): DeepSeek-V3 on H100 at
25.09 (tag v0.1.0rc4 ``scripts/performance/run_script.py``:
``recipe.comm_overlap.overlap_grad_reduce = False`` for ``h100``) and HEAD
(``src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py``: ``cfg.ddp.
overlap_grad_reduce = False``); Kimi-K2 on H100 from 26.04 (v0.4.0, v0.5.0 ``scripts/
performance/configs/kimi/kimi_llm_pretrain.py`` ``kimi_k2_pretrain_config_h100``:
``cfg.comm_overlap.overlap_grad_reduce = False``; HEAD ``perf_recipes/kimi/h100/
kimi_k2.py``). Megatron-core then gathers parameters unoverlapped too
(``overlap_param_gather`` needs ``overlap_grad_reduce``)."""


def grad_reduce_overlapped(raw: dict[str, str]) -> bool:
    """False for the rows of `GRAD_REDUCE_NOT_OVERLAPPED`, True otherwise."""
    source = raw.get("source_id", "")
    if not source.startswith("MBRIDGE-"):
        return True
    model, gpu, _ = _row_keys(raw)
    release = _release(source)
    return not any(
        model.startswith(prefix) and gpu.startswith(gpu_prefix) and release in releases
        for prefix, gpu_prefix, releases in GRAD_REDUCE_NOT_OVERLAPPED
    )


TP_COMM_OVERLAP_MODELS = (("MBRIDGE-", "llama3"),)
"""(source prefix, model prefix) of the rows whose recipe overlaps TP communication with the
GEMMs (Megatron-Bridge ``recipes/llama/h100/llama3.py``: ``CommOverlapConfig(
tp_comm_overlap=True, ...)`` in the Llama 3 70B and Llama 3.1 405B base recipes that the
``perf_recipes/llama/*`` files start from; ``scripts/performance/configs/llama/
llama31_llm_pretrain.py`` of release v0.3.0 keeps it on except for NVFP4)."""


TP_COMM_OVERLAP_FLAG = "--tp-comm-overlap"
"""The Megatron-LM flag as a row's ``notes`` quote it from the source. The Megatron-LM
README's 2024 H100 table (NVIDIA/Megatron-LM ``README.md`` at f2e5db402c, "Training Speed
and Scalability") states "tensor-parallel (`--tp-comm-overlap`)" overlap for every run."""


def tp_overlap(raw: dict[str, str], tp: int, sequence_parallel: bool) -> bool:
    """True when the row's recipe runs ``--tp-comm-overlap`` (`TP_COMM_OVERLAP_MODELS`) or
    its ``notes`` quote the flag as on (`TP_COMM_OVERLAP_FLAG`); it needs tp > 1 with
    sequence parallelism (Megatron-LM ``validate_args``)."""
    notes = raw.get("notes") or ""
    stated = TP_COMM_OVERLAP_FLAG in notes
    return tp > 1 and sequence_parallel and (stated or _matches(raw, TP_COMM_OVERLAP_MODELS))


def userbuffers_fields(raw: dict[str, str], tp_comm_overlap: bool) -> dict[str, object]:
    """`ExecutionOptions` userbuffers fields of a row whose recipe overlaps TP communication
    through a Megatron-Bridge ``TransformerLayerTPOverlapCfg``
    (`TP_COMM_OVERLAP_MODELS`; ``src/megatron/bridge/training/comm_overlap.py``): every
    such configuration runs its ``bulk`` overlaps without an SM margin
    (``BulkOverlapCfg(..., set_sm_margin=False)``), and every FP8 Llama one
    (``userbuffers_fp8_h100_h8192_tp4_*``, ``userbuffers_fp8_b200_h8192_tp2_*``,
    ``userbuffers_fp8_h100_h16384_tp8_cp2_*``, ``userbuffers_fp8_b200_h16384_tp4_cp2_*``,
    the ones ``perf_recipes/llama/*/llama3.py`` and ``llama31.py`` pass) reduce-scatters
    the row-parallel forward GEMMs by ``ring_exchange``. Empty for other rows (Transformer
    Engine's defaults)."""
    if not tp_comm_overlap or not _matches(raw, TP_COMM_OVERLAP_MODELS):
        return {}
    fields: dict[str, object] = {"tp_overlap_bulk_sm_margin": False}
    if "FP8" in (raw.get("precision") or "").upper():
        fields["tp_overlap_rs_method"] = "ring_exchange"
    return fields


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
    return "untied" in notes or _matches(raw, UNTIED_MODELS)


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
    """Why a row cannot be priced as what it ran, or None.

    - LoRA fine-tuning: frozen base weights (no weight gradients, no optimizer state for
      them) and adapter GEMMs; a `TrainingJob` trains every weight.
    - DeepSpeed ZeRO-3 (SC21 Table 2): it shards what Megatron-FSDP's ``optim_grads_params``
      shards (Rajbhandari et al., arXiv 1910.02054, Sec. 5.3), but it ran DeepSpeed's
      stage-3 engine of 2021, whose gather and prefetch schedule is not Megatron-FSDP's, and
      the row states no recompute although the 175B model's activations without it exceed
      the 80 GB device many times over.
    - The source itself flags the figure as a known performance regression (Megatron-Bridge
      26.06.01 GPT-OSS rows, ``notes``).
    """
    task = (raw.get("task") or "").lower()
    if task.startswith("lora"):
        return "LoRA fine-tuning (frozen base weights)"
    if "zero-3" in (raw.get("fsdp_or_zero") or "").lower():
        return "DeepSpeed ZeRO-3 engine (not Megatron-FSDP) with recompute not stated"
    notes = (raw.get("notes") or "").lower()
    if "performance regression" in notes and "known issue" in notes:
        return "the source flags the figure as a known performance regression"
    return None


CPU_OFFLOAD_LAYERS = (
    ("llama3_70b", "GB300", 20),
    ("llama3_70b", "GB200", 40),
    ("llama3_70b", "B200", 5),
    ("llama3.1_405b", "GB200", 95),
)
"""(model prefix, GPU prefix, layers) of the Megatron-Bridge FP8 Megatron-FSDP rows that
offload activations to host memory (``cpu_offloading_num_layers``): Llama 3 70B on
GB300 20, GB200 40, B200 5 (``scripts/performance/configs/llama/
llama3_workload_base_configs.py`` ``*_FP8_CS_V1``, releases v0.2.0-v0.5.0, and
``src/megatron/bridge/perf_recipes/llama/{gb200,gb300}/llama3.py``); Llama 3.1 405B on
GB200 95 (``scripts/performance/configs/llama31/llama31_405b_llm_pretrain.yaml``
``fp8_cs``, release v0.1.0rc4, NeMo 25.09)."""

ALL_RELEASES = ("25.09", "25.11", "26.02", "26.04", "26.06")
"""Megatron-Bridge releases of the dev set's rows (NeMo containers), oldest first."""

H100_RELEASES = (*ALL_RELEASES, "26.08")
"""The releases of Megatron-Bridge's H100 recipes: `ALL_RELEASES` and HEAD (067f987d, tag
v0.6.0, ``src/megatron/bridge/perf_recipes/*/h100/``), whose model verification cards
(``examples/model_verification_cards/*/card.yaml``) name 26.08 containers."""

DEEPSEEK_RECOMPUTE_MODULES: tuple[tuple[tuple[str, ...], str, str, tuple[str, ...] | None], ...] = (
    (("26.04.01",), "B200", "MXFP8", ("mla_up_proj", "mlp")),
    (("25.09",), "H100", "", ("mla_up_proj", "mlp")),
    (("25.09",), "", "", None),
    (("25.11",), "GB300", "", ("moe_act",)),
    (ALL_RELEASES, "GB300", "BF16", ("moe_act",)),
    (("26.06",), "GB300", "MXFP8", ()),
    (ALL_RELEASES, "GB300", "", ("mla_up_proj",)),
    (("25.11", "26.02"), "GB200", "", ("mla_up_proj",)),
    (ALL_RELEASES, "GB200", "BF16", ("mla_up_proj",)),
    (("26.06",), "GB200", "MXFP8", ("mla_up_proj",)),
    (ALL_RELEASES, "GB200", "", ("mlp",)),
    (H100_RELEASES, "H100", "", ("mla_up_proj", "mlp")),
    (ALL_RELEASES, "B", "", ("mla_up_proj",)),
)
"""(releases, GPU prefix, precision prefix or "" for any, modules), first match wins: the
selective recompute of Megatron-Bridge's DeepSeek-V3 rows per release (container 25.09 =
tag v0.1.0rc4, 25.11 = v0.2.x, 26.02 = v0.3.x, 26.04 = v0.4.x, 26.06 = v0.5.x, 26.08 =
HEAD, `H100_RELEASES`). Every release sets ``recompute_granularity: selective`` (25.09
``scripts/performance/configs/deepseek/deepseek_v3_llm_pretrain.yaml``, no modules:
Megatron's default ``core_attn``, except on H100, where ``scripts/performance/
run_script.py`` sets ``mla_up_proj`` and ``mlp``; later ``deepseek_llm_pretrain.py``); the
modules come from ``workload_base_configs.py``
(25.11: GB300 ``moe_act``, GB200/B200 ``mla_up_proj``, H100 ``mla_up_proj`` + ``mlp``)
and ``deepseek_workload_base_configs.py`` ``DEEPSEEK_V3_PRETRAIN_CONFIG_*_V1`` (26.02: GB300
``mla_up_proj``, its BF16 ``moe_act``, GB200 ``mla_up_proj``; 26.04: GB200 ``mlp``, its
BF16 ``mla_up_proj``; 26.06: GB300 MXFP8 none, GB200 MXFP8 ``mla_up_proj``; B200/B300
``mla_up_proj`` throughout; H100 ``mla_up_proj`` and ``mlp`` in every release, HEAD's
``perf_recipes/deepseek/h100/deepseek_v3.py`` too), except 26.04.01 (branch
``llmb-r0.4.1``) B200 MXFP8,
``DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2``: ``mla_up_proj`` and ``mlp``. An entry's
releases match the container's first five characters or its whole name."""

KIMI_K2_GB300_SAVERS: dict[str, object] = {
    "recompute": "selective",
    "recompute_modules": ("mla_up_proj",),
}
"""Megatron-Bridge's Kimi-K2 GB300 rows (26.02.01 to 26.06): ``recompute_granularity =
"selective"`` (``scripts/performance/configs/kimi/kimi_llm_pretrain.py``) with
``recompute_modules=["mla_up_proj"]`` (``kimi_workload_base_configs.py``
``KIMI_K2_PRETRAIN_CONFIG_GB300``, branches r0.3.0, v0.4.0, llmb-r0.4.1, v0.5.0)."""

MOEZOO_QWEN3_SAVERS: dict[str, object] = {
    "recompute": "selective",
    "recompute_modules": ("moe_act", "layernorm"),
    "offload_modules": ("expert_fc1", "moe_act"),
}
"""The Megatron-MoE model zoo's Qwen3-235B-A22B MXFP8 GB200 command
(``best_practice/qwen3/readme.md``: ``--recompute-granularity selective
--recompute-modules moe_act layernorm --fine-grained-activation-offloading
--offload-modules expert_fc1 moe_act``; "MXFP8 config requires the activation offloading
feature")."""


KIMI_K2_H100_SAVERS: dict[str, object] = {
    "recompute": "selective",
    "recompute_modules": ("mla_up_proj", "mlp"),
}
"""Megatron-Bridge's Kimi-K2 H100 recipes: ``recompute_modules=["mla_up_proj", "mlp"]``
(v0.4.0, v0.5.0 ``scripts/performance/configs/kimi/kimi_workload_base_configs.py``
``KIMI_K2_PRETRAIN_CONFIG_H100``, under ``kimi_llm_pretrain.py``'s selective granularity;
HEAD ``src/megatron/bridge/perf_recipes/kimi/h100/kimi_k2.py``)."""

LLAMA3_8B_H100_FP8_RECOMPUTE: dict[str, object] = {
    "recompute": "full",
    "recompute_method": "block",
    "recompute_num_layers": 5,
}
"""Megatron-Bridge's Llama 3 8B H100 FP8 current-scaling recipe from 25.11: full recompute
of 5 layers by block (v0.2.0 ``scripts/performance/configs/llama3/workload_base_configs.py``
``LLAMA3_8B_H100_FP8_CS_BASE_CONFIG``, ``recompute_num_layers=5``, which
``utils/helpers.py`` (``utils/overrides.py`` from v0.3.0) turns into
``recompute_granularity="full"``, ``recompute_method="block"``; v0.3.0 to v0.5.0
``llama3_workload_base_configs.py`` ``LLAMA3_8B_PRETRAIN_CONFIG_H100_FP8_CS_V1``; HEAD
``perf_recipes/llama/h100/llama3.py`` ``llama3_8b_pretrain_8gpu_h100_fp8cs_config``).
25.09's H100 FP8 recipe runs Megatron-FSDP without recompute
(``llama3_8b_llm_pretrain.yaml``), which this leaves out."""


def saver_fields(raw: dict[str, str], pp: int, fsdp: bool) -> dict[str, object]:
    """Per-module recompute and activation-offloading fields the row's recipe sets
    (`CPU_OFFLOAD_LAYERS`, `DEEPSEEK_RECOMPUTE_MODULES`, `KIMI_K2_GB300_SAVERS`,
    `KIMI_K2_H100_SAVERS`, `LLAMA3_8B_H100_FP8_RECOMPUTE`, `MOEZOO_QWEN3_SAVERS`); empty for
    rows whose recipe sets none."""
    source = raw.get("source_id", "")
    model, gpu, precision = _row_keys(raw)
    if source.startswith("MBRIDGE-") and fsdp and pp == 1 and not precision.startswith("BF16"):
        for prefix, gpu_prefix, layers in CPU_OFFLOAD_LAYERS:
            if model.startswith(prefix) and gpu.startswith(gpu_prefix):
                return {"cpu_offloading_num_layers": layers}
    if source.startswith("MBRIDGE-") and model.startswith("deepseekv3"):
        container = source.removeprefix("MBRIDGE-")
        release = container[:5]
        for releases, gpu_prefix, precision_prefix, modules in DEEPSEEK_RECOMPUTE_MODULES:
            if (
                (release in releases or container in releases)
                and gpu.startswith(gpu_prefix)
                and precision.startswith(precision_prefix)
            ):
                return {"recompute": "selective", "recompute_modules": modules}
    if source.startswith("MBRIDGE-") and model.startswith("kimi_k2") and gpu.startswith("GB300"):
        return dict(KIMI_K2_GB300_SAVERS)
    if source.startswith("MBRIDGE-") and model.startswith("kimi_k2") and gpu.startswith("H100"):
        return dict(KIMI_K2_H100_SAVERS)
    if (
        source.startswith("MBRIDGE-")
        and _release(source) >= "25.11"
        and model.startswith("llama3_8b")
        and gpu.startswith("H100")
        and _is_fp8(precision)
        and not fsdp
    ):
        return dict(LLAMA3_8B_H100_FP8_RECOMPUTE)
    if source.startswith("MOEZOO-QWEN3-GB200") and precision.startswith("MXFP8"):
        return dict(MOEZOO_QWEN3_SAVERS)
    return {}


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


def _row_keys(raw: dict[str, str]) -> tuple[str, str, str]:
    """(model in lower case, GPU type and printed precision in upper case) of a CSV row, the
    keys its recipe tables match by prefix."""
    return (
        (raw.get("model") or "").strip().lower(),
        (raw.get("gpu_type") or "").strip().upper(),
        (raw.get("precision") or "").strip().upper(),
    )


def _release(source: str) -> str:
    """``25.09`` of ``MBRIDGE-25.09``; ``26.04`` of ``MBRIDGE-26.04.01``."""
    return source.removeprefix("MBRIDGE-")[:5]


def _is_fp8(precision: str) -> bool:
    """FP8 current scaling or MXFP8 as the rows print them (25.09: "not stated" with
    current scaling as the main value, or the "alternative quantization granularity")."""
    upper = precision.upper()
    if upper.startswith(("NVFP4", "BF16")):
        return False
    return "FP8" in upper or upper.startswith(("NOT STATED", "ALTERNATIVE"))


def expandable_segments(raw: dict[str, str]) -> bool:
    """True when the row's Megatron-Bridge launch sets expandable allocator segments
    (`EXPANDABLE_SEGMENTS_RECIPES`; from 26.06 every run but Llama with Megatron-FSDP, the
    only recipes with ``nccl_ub``)."""
    source = raw.get("source_id", "")
    if not source.startswith("MBRIDGE-"):
        return False
    model, gpu, precision = _row_keys(raw)
    release = _release(source)
    if release >= "26.06":
        return not (model.startswith("llama") and sharding_fields(raw) is not None)
    return any(
        release in releases
        and model.startswith(prefix)
        and gpu.startswith(gpus)
        and (needs != "FP8" or _is_fp8(precision))
        for releases, prefix, gpus, needs in EXPANDABLE_SEGMENTS_RECIPES
    )


PRINTED_NOT_RECIPE: tuple[tuple[str, str, str, str, str], ...] = (
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
    model, gpu, precision = _row_keys(raw)
    for row_source, prefix, gpu_prefix, printed, reason in PRINTED_NOT_RECIPE:
        if (
            source == row_source
            and model.startswith(prefix)
            and gpu.startswith(gpu_prefix)
            and precision.startswith(printed)
        ):
            return reason
    return None


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
    if not source.startswith(("MBRIDGE-", "MOEZOO-")) or not _is_fp8(precision):
        return {}
    mxfp8 = precision.startswith(("MXFP8", "FP8-MX", "ALTERNATIVE"))
    return {
        "fp8_recipe": "mxfp8" if mxfp8 else "tensorwise",
        "fp8_param": not _matches(raw, FP8_PARAM_OFF),
    }


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
    if not _is_fp8(raw.get("precision") or "") or not _matches(raw, BF16_GRAD_SYNC):
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
    if not _is_fp8(raw.get("precision") or ""):
        return {}
    return dict(PRECISION_AWARE_OPTIMIZER)
