"""Hybrid Mamba-2 rows: which preset a row's model is, and what a Megatron-Bridge Nemotron 3
Nano, Nemotron 3 Super or Nemotron-H recipe ran beyond its printed plan (`hybrid_preset`,
`hybrid_runtime_fields`, `hybrid_plan_fields`).

The models: the dev set prints Nemotron 3 Nano rows without architecture columns (their
``notes``: "architecture not filled (hybrid / new model; see Megatron-Bridge model
providers)"); they take the ``nemotron-3-nano`` preset (`specs.preset_hybrid`, from
Megatron-Bridge's ``Nemotron3NanoProvider``, the model of the performance recipe
``recipes/nemotronh/nemotron_3_nano.py`` ``nemotron_3_nano_pretrain_config``: pattern
``MEMEM*EM...``, hidden 2688, 128 experts of 1856, top-6, shared expert 3712, the same
values). Nemotron-H rows take the preset of their size (8B, 47B, 56B); Nemotron 3 Super rows take
``nemotron-3-super``, with their configs in `super_recipes`.

Recipes (NVIDIA-NeMo/Megatron-Bridge ``scripts/performance/configs/nemotronh/``; releases
by tag as `norm_recipes`: 26.02.01 = v0.3.1 ``nemotron_3_nano_workload_base_configs.py`` and
``nemotron_3_nano_llm_pretrain.py``; 26.04 = v0.4.0, 26.04.01 = branch llmb-r0.4.1, 26.06 =
v0.5.0, 26.06.01 = v0.5.1 ``nemotron_3_workload_base_configs.py`` and
``nemotron_3_llm_pretrain.py``; 26.02 = v0.3.0 ships no Nano config). Every release sets
the same Nano configs (``BASE_NEMOTRON_3_NANO_CONFIG``: 8 GPUs, global batch 512, tp 1,
etp 1, ep 8, ``moe_flex_dispatcher_backend="hybridep"`` -- the flex dispatcher,
``apply_flex_dispatcher_backend`` -- and ``cuda_graph_impl="transformer_engine"`` with
``cuda_graph_scope=["attn", "mamba", "moe_router", "moe_preprocess"]``; micro-batch 4 on
GB300 and B300, 2 on GB200 and B200, which the rows print; no recompute: the base recipe's
``recompute_granularity = None`` and no ``recompute_modules``). The H100 configs
(``NEMOTRON_3_NANO_PRETRAIN_CONFIG_H100_*_V1``: 16 GPUs, global batch 1024, micro-batch 1)
capture ``attn`` and ``mamba`` in BF16 with ``recompute_modules=["moe", "layernorm"]``, and
``mamba`` alone in FP8-CS with ``["moe", "layernorm", "core_attn", "moe_act"]``
(``_set_recompute_overrides``: selective). HEAD (067f987d, 26.08,
``src/megatron/bridge/perf_recipes/nemotronh/h100/nemotronh.py``): BF16 as before; FP8-CS
at ep 16 with ``attn`` and ``mamba`` graphs and ``recompute_modules=["layernorm"]``.
``set_nemotron_3_nano_common_configs`` sets ``moe_router_force_load_balancing`` (balanced
routing, the cost model's default) and bf16 gradient reduction
(`row_options.MEGATRON_BRIDGE_PERF`); the cuDNN norms are `norm_recipes`'.

Nemotron-H 56B (``nemotronh_workload_base_configs.py`` v0.3.0-v0.5.1, ``workload_base_configs.py``
v0.2.0, ``BASE_NEMOTRONH_56B_CONFIG``): 64 GPUs, global batch 192, micro-batch 1, FP8-CS,
tp 8 on H100 with ``mamba`` graphs, tp 2 with ``mamba`` and ``attn`` on the Blackwell GPUs;
its base recipe overlaps TP communication and not the parameter gather
(`hybrid_plan_fields`). The dev set has no Nemotron-H row; the H100
recipes price it (`h100_recipe_hybrid`), and `nemo_h100_recipes` prices NeMo 2.0's H100
Nemotron-H 8B, 47B and 56B configurations (their NeMo rules: `nemo_options`, `nemo_recipes`).

The ``mamba`` scope (`costmodel.execution_rules.CUDA_GRAPH_SCOPES`) captures the Mamba
layers' launches. The cost model's host-launch term counts only MoE launches
(`costmodel.runtimes.megatron.moe_launches`), so the scope changes no priced term; it is
kept so the options say what the recipe ran.
"""

from __future__ import annotations

import re

from recipe_keys import NotExpressible, is_fp8, release_of, row_keys
from super_recipes import (
    SUPER_FIRST_RELEASE,
    SUPER_MODELS,
    SUPER_PRESET,
    super_model_fields,
    super_plan_fields,
    super_runtime_fields,
)

NANO_MODELS = ("nemotron_3_nano", "nemotron-3-nano", "nemotron 3 nano")
"""Model names (lower case, prefix) of Nemotron 3 Nano rows."""
NANO_PRESET = "nemotron-3-nano"

NEMOTRON_H = re.compile(r"^nemotron[-_ ]?h[-_ ]?(\d+)b\b")
"""A Nemotron-H model name (lower case) with its size in billions: ``Nemotron-H 56B``,
``NemotronH_56B``, ``nemotron_h_8b``."""
NEMOTRON_H_PRESETS = {"8": "nemotron-h-8b", "47": "nemotron-h-47b", "56": "nemotron-h-56b"}
"""Nemotron-H size -> preset (`specs.preset_hybrid`)."""


def hybrid_preset(raw: dict[str, str]) -> str | None:
    """The preset of a Nemotron 3 Nano, Nemotron 3 Super or Nemotron-H row (module
    docstring); None for other rows, and for a Nemotron-H size without a preset."""
    model, _, _ = row_keys(raw)
    if model.startswith(NANO_MODELS):
        return NANO_PRESET
    if model.startswith(SUPER_MODELS):
        return SUPER_PRESET
    found = NEMOTRON_H.match(model)
    return NEMOTRON_H_PRESETS.get(found.group(1)) if found else None


NANO_FIRST_RELEASE = "26.02.01"
"""The first Megatron-Bridge release with Nemotron 3 Nano configs (v0.3.1)."""

ATTN_MAMBA = frozenset({"attn", "mamba"})
NANO_BLACKWELL_SCOPES = ATTN_MAMBA | {"moe_router", "moe_preprocess"}
"""``BASE_NEMOTRON_3_NANO_CONFIG``'s graphs (every Blackwell GPU, every release)."""
NEMOTRON_H_FIRST_RELEASE = "25.11"
"""The first Megatron-Bridge release with Nemotron-H 56B configs (v0.2.0)."""
HEAD_RELEASE = "26.08"
"""HEAD's release (`recipe_keys.H100_RELEASES`)."""

NANO_H100_RECOMPUTE = {
    "BF16": ("moe", "layernorm"),
    "FP8": ("moe", "layernorm", "core_attn", "moe_act"),
    "HEAD FP8": ("layernorm",),
}
"""Selective recompute modules of the Nano H100 configs (module docstring)."""


def _mbridge_keys(raw: dict[str, str]) -> tuple[str, str, str, str] | None:
    """(container, model, GPU, precision) of a Megatron-Bridge row (`row_keys` casing), or
    None for another source."""
    source = raw.get("source_id", "")
    if not source.startswith("MBRIDGE-"):
        return None
    model, gpu, precision = row_keys(raw)
    return source.removeprefix("MBRIDGE-"), model, gpu, precision


def _nano_release(container: str) -> bool:
    """Whether ``container`` ships Nano configs (26.02.01 on; 26.02 has none)."""
    return release_of(container) > "26.02" or container.startswith(NANO_FIRST_RELEASE)


def hybrid_model_fields(raw: dict[str, str]) -> dict[str, object]:
    """`ModelSpec` fields a Megatron-Bridge hybrid row's config sets beyond its preset
    (`super_recipes.super_model_fields`); empty for other rows."""
    keys = _mbridge_keys(raw)
    if keys is None:
        return {}
    container, model, gpu, _ = keys
    if model.startswith(SUPER_MODELS):
        return super_model_fields(container, gpu)
    return {}


def hybrid_runtime_fields(raw: dict[str, str]) -> dict[str, object]:
    """`ExecutionOptions` fields (``moe_dispatcher``, ``cuda_graph_scopes``) of a
    Megatron-Bridge Nemotron 3 Nano, Nemotron 3 Super (`super_recipes.super_runtime_fields`)
    or Nemotron-H 56B row's recipe (module docstring); empty for other rows."""
    keys = _mbridge_keys(raw)
    if keys is None:
        return {}
    container, model, gpu, precision = keys
    if model.startswith(SUPER_MODELS) and release_of(container) >= SUPER_FIRST_RELEASE:
        return super_runtime_fields(container, gpu, precision)
    if model.startswith(NANO_MODELS) and _nano_release(container):
        if not gpu.startswith("H100"):
            return {"moe_dispatcher": "flex", "cuda_graph_scopes": NANO_BLACKWELL_SCOPES}
        fp8_before_head = is_fp8(precision) and release_of(container) < HEAD_RELEASE
        scopes = frozenset({"mamba"}) if fp8_before_head else ATTN_MAMBA
        return {"moe_dispatcher": "flex", "cuda_graph_scopes": scopes}
    if hybrid_preset(raw) == "nemotron-h-56b" and release_of(container) >= NEMOTRON_H_FIRST_RELEASE:
        return {"cuda_graph_scopes": frozenset({"mamba"}) if gpu.startswith("H100") else ATTN_MAMBA}
    return {}


def hybrid_plan_fields(raw: dict[str, str], tp: int, sequence_parallel: bool) -> dict[str, object]:
    """`ParallelPlan` fields of a Megatron-Bridge hybrid row's recipe beyond its printed
    columns; empty for other rows (the Blackwell Nano recipes set none):
    - Nemotron 3 Super: `super_recipes.super_plan_fields`;
    - Nemotron 3 Nano on H100: selective recompute of `NANO_H100_RECOMPUTE`;
    - Nemotron-H 56B: TP communication overlap with Transformer Engine's default userbuffers
      (``recipes/nemotronh/nemotronh.py`` ``nemotronh_56b_pretrain_config``:
      ``CommOverlapConfig(tp_comm_overlap=True)`` without a ``tp_comm_overlap_cfg``; it
      needs tp > 1 with sequence parallelism) and no parameter-gather overlap
      (``cfg.ddp.overlap_param_gather = False``; v0.2.0 and v0.3.0 pass the same in
      ``DistributedDataParallelConfig``), no recompute."""
    keys = _mbridge_keys(raw)
    if keys is None:
        return {}
    container, model, gpu, precision = keys
    if model.startswith(SUPER_MODELS) and release_of(container) >= SUPER_FIRST_RELEASE:
        return super_plan_fields(container, gpu, precision)
    if hybrid_preset(raw) == "nemotron-h-56b" and release_of(container) >= NEMOTRON_H_FIRST_RELEASE:
        return {"tp_comm_overlap": tp > 1 and sequence_parallel, "overlap_param_gather": False}
    if not (model.startswith(NANO_MODELS) and gpu.startswith("H100") and _nano_release(container)):
        return {}
    key = "FP8" if is_fp8(precision) else "BF16"
    if key == "FP8" and release_of(container) >= HEAD_RELEASE:
        key = "HEAD FP8"
    return {"recompute": "selective", "recompute_modules": NANO_H100_RECOMPUTE[key]}


def check_stated_architecture(raw: dict[str, str], preset: dict[str, int | None]) -> None:
    """NotExpressible when a row states an architecture column that its preset's value
    contradicts (``preset``: column -> the preset's value); the dev set's Nano rows state
    none."""
    for column, value in preset.items():
        text = (raw.get(column) or "").strip()
        if text in ("", "n/a") or value is None:
            continue
        if not re.fullmatch(r"\d+", text) or int(text) != value:
            raise NotExpressible(
                f"{column} {text!r} stated, but the {raw.get('model')!r} preset has {value}: "
                "empty the column or correct it"
            )
