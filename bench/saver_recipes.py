"""The memory savers a published row leaves to its recipe: recompute and activation offloading.

Per-module selective recompute, full recompute by block, and activation offloading to host
memory of the Megatron-Bridge and Megatron-MoE model zoo rows, each read from the recipe of
the row's release (files cited per entry). Nothing here depends on the row's published
figure.
"""

from __future__ import annotations

from recipe_keys import ALL_RELEASES, H100_RELEASES, is_fp8, release_of, row_keys

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
    model, gpu, precision = row_keys(raw)
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
        and release_of(source) >= "25.11"
        and model.startswith("llama3_8b")
        and gpu.startswith("H100")
        and is_fp8(precision)
        and not fsdp
    ):
        return dict(LLAMA3_8B_H100_FP8_RECOMPUTE)
    if source.startswith("MOEZOO-QWEN3-GB200") and precision.startswith("MXFP8"):
        return dict(MOEZOO_QWEN3_SAVERS)
    return {}
