"""What a NeMo 2.0 performance-recipe row ran beyond its printed plan, per NeMo container:
its parallel plan and model fields (`nemo_plan_fields`, `nemo_model_fields`). The execution
options are `nemo_options`'; which rows are NeMo 2.0 rows, and of which container,
`nemo_keys`'.

A row of ``published-runs-dev.csv`` is a NeMo 2.0 performance-recipe row when its
``source_version`` reads "NeMo YY.MM[...] container" (or starts "NeMo YY.MM") with YY.MM at
or after 25.02 (`nemo_keys.FIRST_RELEASE`, the first container with NeMo 2.0's performance
scripts) and its source is not Megatron-Bridge (``MBRIDGE-`` rows run Megatron-Bridge's scripts,
`bench/row_recipes.py` and `bench/moe_recipes.py`). NeMo 1.x rows (``NEMO-LONGSEQ``, "NeMo
24.03.01.framework container") are left as they are.

Sources: NVIDIA/NeMo, the performance scripts (``scripts/llm/performance/`` at v2.2.0,
``scripts/performance/`` later: ``utils.py``, ``helpers.py``, ``llm/pretrain_*.py``,
``recommended_model_configs/model_configs_h100.csv``) and the recipes they start from
(``nemo/collections/llm/recipes/*.py`` with ``performance_mode=True``,
``recipes/precision/mixed_precision.py``, ``recipes/tp_overlap_configs/userbuffers.py``).
Containers by tag: `nemo_keys.RELEASE_TAGS`.

Plan and model fields (`nemo_plan_fields`, `nemo_model_fields`): the distributed optimizer
of every recipe, TP overlap (`TP_OVERLAP_FAMILIES`, off under Megatron-FSDP in 25.04:
`DEFER_WGRAD_FAMILIES`), Megatron-FSDP (`nemo_keys.fsdp_stated`), the embedding and loss as
pipeline layers (`ACCOUNT_FOR_BOTH`), token drop (`TOKEN_DROP`), DeepSeek-V3's MTP layer, pipeline
split and recompute (`deepseek_pipeline_fields`, `DEEPSEEK_RECOMPUTE`).

CUDA graphs (``cuda_graphs`` 1) are set on H100 only for Nemotron-H and Llama 4 (no preset);
Nemotron-H's (`nemo_options.CUDA_GRAPH_FAMILIES`) are the ``layer`` scope. Nemotron-H
(v2.4.0 and v2.5.0rc0, the same files): ``pretrain_nemotronh_{8b,47b,56b}.py`` start from
``recipes/nemotronh_*.py`` ``pretrain_recipe`` (``performance_mode=True`` for 47B and 56B;
8B has no performance mode) and run ``set_primary_perf_configs`` like every script, so the
generic rules of `nemo_options` apply (FP8 ``ds``: ``bf16_with_fp8_mixed`` replaces the 47B / 56B
recipe's ``nemotron_h_bf16_with_fp8_current_scaling_mixed``, and its
``first_last_layers_bf16 = False`` overrides ``NemotronHConfigBase``'s True through
``update_config_with_dtype_overrides``: every layer in FP8; bf16 gradient reduction over the
trainer's ``grad_reduce_in_fp32=True``). Beyond them:
- TP overlap (`TP_OVERLAP_FAMILIES`): ``MegatronCommOverlapCallback(tp_comm_overlap=True)``
  (8B in its trainer with ``tp_comm_bootstrap_backend="nccl"``, 47B / 56B in
  ``performance_optimizations``) without a ``tp_comm_overlap_cfg``: Transformer Engine's
  default userbuffers, on at tp 8 with sequence parallelism (8B runs tp 1: off).
- The trainers' ``DistributedDataParallelConfig(overlap_param_gather=False)`` does not hold:
  the same callback's ``_get_optimizer_overlap_cfgs`` sets ``overlap_grad_reduce`` and
  ``overlap_param_gather`` True with dp > 1 (every H100 config) and applies them to the DDP
  config, so the rows keep the default overlaps of NeMo 2.0 rows.
- The launch's expandable allocator segments (``executors.py``, `nemo_options.allocator_fields`).
- Not modelled: ``use_te_rng_tracker`` (set with CUDA graphs) and the scripts' NCCL
  settings (``PerfEnvPlugin``); no recompute (the configs' ``recompute_*`` are 0 or empty).
"""

from __future__ import annotations

import re
from typing import get_args

from nemo_keys import fsdp_stated, model_family, nemo_release, on_h100
from pipeline_recipes import recipe_layout
from recipe_keys import NotExpressible

from specs.model import ModelSpec
from specs.plan import RecomputeModule

RECOMPUTE_MODULES: tuple[str, ...] = get_args(RecomputeModule)
"""Megatron-core's selective-recompute module names (`specs.plan.RecomputeModule`)."""

TP_OVERLAP_FAMILIES: tuple[tuple[str, str], ...] = (
    ("llama370b", "25.02"),
    ("llama3170b", "25.02"),
    ("llama31405b", "25.02"),
    ("llama3405b", "25.02"),
    ("gpt3", "25.02"),
    ("nemotron4", "25.02"),
    ("qwen3", "25.07"),
    ("nemotronh", "25.07"),
)
"""(model family prefix, first release) whose recipe overlaps TP communication
(``MegatronCommOverlapCallback(tp_comm_overlap=True, ...)``): the performance mode of
``recipes/llama3_70b.py``, ``llama31_405b.py``, ``gpt3_175b.py``, ``nemotron4_15b.py``,
``nemotron4_340b.py`` (v2.2.0 on), ``pretrain_qwen3_30b_a3b.py`` /
``pretrain_qwen3_235b_a22b.py`` (v2.4.0 on), and ``recipes/nemotronh_8b.py`` (trainer),
``nemotronh_47b.py`` / ``nemotronh_56b.py`` (performance mode; v2.4.0 is the first release
with Nemotron-H performance scripts). Llama 3 8B (``tp_comm_overlap=False``),
Mixtral and DeepSeek-V3 (``tp_comm_overlap=False``) do not."""

DEFER_WGRAD_FAMILIES = (
    "llama370b",
    "llama3170b",
    "llama31405b",
    "llama3405b",
    "gpt3",
    "nemotron4340b",
)
"""Model family prefixes whose performance recipe defers the embedding's weight gradient
(``defer_embedding_wgrad_compute=True`` in ``recipes/llama3_70b.py``, ``llama31_70b.py``,
``llama31_405b.py``, ``gpt3_175b.py``, ``nemotron4_340b.py`` at v2.3.0). Under
Megatron-FSDP, 25.04's ``set_primary_perf_configs`` turns that deferral off and, with
tp > 1, TP overlap too ("TP overlap performance is poor when FSDP is used"); 25.07's
``set_mcore_fsdp_configs`` keeps TP overlap."""

TOKEN_DROP: tuple[tuple[str, str, str], ...] = (
    ("qwen3", "25.07", "99.99"),
    ("mixtral8x22b", "25.04", "99.99"),
    ("deepseekv3", "25.04", "99.99"),
)
"""(model family prefix, first release, last release) whose scripts drop tokens with
``MegatronTokenDropCallback`` (``moe_expert_capacity_factor = 1.0``, inputs padded to
capacity; ``nemo/lightning/pytorch/callbacks/moe_token_drop.py``): Qwen3
(``pretrain_qwen3_*.py``, v2.4.0 on), Mixtral 8x22B (``recipes/mixtral_8x22b_64k.py``
performance mode, v2.3.0 on), DeepSeek-V3 at 25.04 (``pretrain_deepseek_v3.py``
``USE_TOKEN_DROP = True``; from v2.4.0 only off H100, where H100 runs DeepEP dropless)."""

TOKEN_DROP_CAPACITY = 1.0
"""``MegatronTokenDropCallback``'s default ``moe_expert_capacity_factor``."""


def nemo_model_fields(raw: dict[str, str]) -> dict[str, object]:
    """`ModelSpec` fields of a NeMo 2.0 performance-recipe row: the token-drop capacity
    (`TOKEN_DROP`) and DeepSeek-V3's one MTP layer (``recipes/deepseek_v3.py``
    ``pretrain_recipe(use_mtp=True)`` builds ``DeepSeekV3Config(mtp_num_layers=1)``, v2.3.0
    to v2.5.0rc0, and ``pretrain_deepseek_v3.py`` does not change it), none when the row's
    model says "w/o MTP"; empty for other rows."""
    release = nemo_release(raw)
    if release is None:
        return {}
    family = model_family(raw)
    fields: dict[str, object] = {}
    if family.startswith("deepseekv3"):
        fields["mtp_num_layers"] = 0 if "w/o mtp" in (raw.get("model") or "").lower() else 1
    deep_ep = family.startswith("deepseekv3") and release >= "25.07" and on_h100(raw)
    for prefix, first, last in TOKEN_DROP:
        if family.startswith(prefix) and first <= release <= last and not deep_ep:
            fields["moe_capacity_factor"] = TOKEN_DROP_CAPACITY
    return fields


DEEPSEEK_RECOMPUTE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("25.09", ("mla_up_proj", "mlp", "moe")),
    ("25.07", ("mla_up_proj", "mlp")),
    ("25.04", ("mla_up_proj",)),
)
"""(first release, modules), latest first: the selective recompute of DeepSeek-V3's H100
pre-train configs (``model_configs_h100.csv`` ``recompute_modules``: v2.3.0
``mla_up_proj``, v2.4.0 ``mla_up_proj/mlp``, v2.5.0rc0 ``mla_up_proj/mlp/moe``), for a row
that prints no recompute."""


def deepseek_pipeline_fields(
    release: str, pp: int, vpp: int, layers: int, mtp: int
) -> dict[str, object]:
    """DeepSeek-V3's pipeline split (``pretrain_deepseek_v3.py``): 25.04 puts
    64/pp - 1 layers on the first stage and 64/pp - 2 on the last; from 25.07 an explicit
    layout per (pp, vpp) (``map_pp_vp_to_layout``), the embedding plus ceil(L/S) layers
    first, ceil(L/S) per middle stage, the rest with the loss last over S = pp·vpp stages
    (`pipeline_recipes.recipe_layout`). The map names no MTP layer: Megatron-core of mid-2025
    builds the MTP block on the last pipeline stage (its layout parser refused ``mtp``
    entries, ``pipeline_parallel_layer_layout.py`` at 77732c3628, 2025-06), so the layout
    priced puts the ``mtp`` layers before the loss."""
    if pp == 1:
        return {}
    if release < "25.07":
        middle = 64 // pp
        return {
            "decoder_first_pipeline_num_layers": middle - 1,
            "decoder_last_pipeline_num_layers": middle - 2,
        }
    return {"pipeline_model_parallel_layout": recipe_layout(layers, pp * vpp, mtp)}


ACCOUNT_FOR_BOTH: tuple[tuple[str, str], ...] = (
    ("llama31405b", "25.04"),
    ("llama3405b", "25.04"),
    ("qwen3235b", "25.07"),
)
"""(model family prefix, first release) whose recipe counts the embedding and the loss as
pipeline layers: ``recipes/llama31_405b.py`` ``trainer(account_for_embedding_in_pipeline_
split=True, account_for_loss_in_pipeline_split=True)`` and ``recipes/qwen3_235b_a22b.py``
(``MegatronStrategy(..., account_for_embedding_in_pipeline_split=True,
account_for_loss_in_pipeline_split=True)``, v2.4.0 on). The recipe sets them at v2.2.0 too,
but 25.02's H100 configuration (pp 9, vpp 7) cannot have run them: Megatron-core
``core_r0.11.0`` ``get_num_layers_to_build`` asserts (126 + 2) % pp == 0, and 126 layers
split evenly over its 63 virtual stages; 25.02 rows are priced without them."""


def recompute_modules_stated(raw: dict[str, str]) -> tuple[str, ...] | None:
    """Modules a selective ``recompute`` column names in parentheses ("selective
    (mla_up_proj, mlp)"), None when it names none or the recompute is not selective."""
    text = (raw.get("recompute") or "").strip()
    found = re.search(r"\(([^)]*)\)", text)
    if found is None or not text.lower().startswith("selective"):
        return None
    names = tuple(n for n in re.split(r"[\s,/]+", found.group(1)) if n)
    unknown = [n for n in names if n not in RECOMPUTE_MODULES]
    if unknown:
        raise NotExpressible(f"recompute modules {unknown} (known: {', '.join(RECOMPUTE_MODULES)})")
    return names or None


def nemo_plan_fields(
    raw: dict[str, str], model: ModelSpec, plan_fields: dict[str, object]
) -> dict[str, object]:
    """`ParallelPlan` fields of a NeMo 2.0 performance-recipe row: the distributed optimizer
    (every pre-train recipe's ``distributed_fused_adam_with_cosine_annealing``:
    ``OptimizerConfig(use_distributed_optimizer=True)``, ``recipes/optim/adam.py``) whatever
    the source id, TP overlap
    (`TP_OVERLAP_FAMILIES`, with tp > 1 and sequence parallelism), Megatron-FSDP
    (`fsdp_stated`), the embedding and loss as pipeline layers (`ACCOUNT_FOR_BOTH`),
    DeepSeek-V3's pipeline split and recompute modules
    (`deepseek_pipeline_fields`, `DEEPSEEK_RECOMPUTE`), modules the ``recompute`` column
    names; empty for other rows."""
    release = nemo_release(raw)
    if release is None:
        return {}
    family = model_family(raw)
    tp, pp, vpp = (int(plan_fields[k]) for k in ("tp", "pp", "vpp"))  # type: ignore[call-overload]
    overlap = any(family.startswith(p) and release >= first for p, first in TP_OVERLAP_FAMILIES)
    on = overlap and tp > 1 and bool(plan_fields["sequence_parallel"])
    if fsdp_stated(raw) and release == "25.04" and family.startswith(DEFER_WGRAD_FAMILIES):
        on = False
    fields: dict[str, object] = {"tp_comm_overlap": on or bool(plan_fields["tp_comm_overlap"])}
    if fsdp_stated(raw):
        fields["use_megatron_fsdp"] = True
        fields["data_parallel_sharding_strategy"] = "optim_grads_params"
        fields["distributed_optimizer"] = False
    else:
        fields["distributed_optimizer"] = True
    modules = recompute_modules_stated(raw)
    if pp > 1 and any(family.startswith(p) and release >= r for p, r in ACCOUNT_FOR_BOTH):
        fields["account_for_embedding_in_pipeline_split"] = True
        fields["account_for_loss_in_pipeline_split"] = True
    if family.startswith("deepseekv3"):
        mtp = int(nemo_model_fields(raw).get("mtp_num_layers", 0))  # type: ignore[call-overload]
        fields.update(deepseek_pipeline_fields(release, pp, vpp, model.num_layers, mtp))
        if not (raw.get("recompute") or "").strip():
            modules = next(
                m for first, m in DEEPSEEK_RECOMPUTE if release >= first or first == "25.04"
            )
    if modules is not None:
        fields["recompute"] = "selective"
        fields["recompute_modules"] = modules
    return fields
