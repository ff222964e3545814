"""What a Megatron-Bridge or Megatron-MoE model zoo row's recipe ran beyond its printed plan:
CUDA graph capture, the token dispatcher and token dropping, per release
(`moe_runtime_fields`, `token_drop_capacity`).

Sources (NVIDIA-NeMo/Megatron-Bridge; release branch of each NeMo container):
- NeMo 25.09 (``r0.1.0``): ``scripts/performance/run_script.py`` applies
  ``apply_moe_token_drop`` (``src/megatron/bridge/training/utils/moe_token_drop.py``:
  capacity factor 1.0, inputs padded to capacity, alltoall dispatcher) to every Qwen3 MoE
  run and to DeepSeek-V3 on B200 and GB200: the rows labelled ``(tokendrop)``. Its
  ``configs/qwen3/*.yaml`` set ``cuda_graphs: true`` for Qwen3 30B-A3B (B200, GB200) and
  Qwen3 235B-A22B (GB200); ``utils/helpers.py`` ``set_cuda_graph_overrides`` maps that to
  ``model.enable_cuda_graph``, Megatron-core's local implementation at its default scope:
  the whole transformer layer.
- NeMo 25.11 (tag ``v0.2.0``, ``configs/qwen3/workload_base_configs.py``) and 26.02 (tag
  ``v0.3.0``, ``configs/qwen/qwen3_workload_base_configs.py``): Qwen3 30B-A3B captures
  ``moe_router`` and ``moe_preprocess`` (plus ``attn`` on GB200 BF16/FP8-CS) with
  ``cuda_graph_impl="transformer_engine"`` on every Blackwell GPU; GB200, GB300 and B300
  set ``moe_flex_dispatcher_backend="hybridep"``, which
  ``src/megatron/bridge/training/flex_dispatcher_backend.py`` turns into
  ``moe_token_dispatcher_type="flex"``; B200 keeps alltoall at micro-batch 1.
- NeMo 26.02.01 onwards (branch ``r0.3.0`` and later, ``r0.4.0``, ``r0.5.0``, then
  ``src/megatron/bridge/perf_recipes/qwen/*/qwen3_moe.py``): B200 too runs HybridEP at
  micro-batch 4 with ``attn``, ``moe_router`` and ``moe_preprocess`` captured.
- NeMo 26.06 (tag ``v0.5.0``, ``configs/qwen/qwen3_workload_base_configs.py``,
  ``QWEN3_30B_A3B_PRETRAIN_CONFIG_{GB300,GB200,B300}_FP8_MX_V1``): the MXFP8 recipes set
  ``moe_a2a_overlap``, ``cuda_graph_impl="full_iteration"``, ``cutedsl_fused_grouped_mlp``
  and ``fp8_dot_product_attention``. ``utils/overrides.py`` ``set_workload_base_configs``
  turns ``cutedsl_fused_grouped_mlp`` into ``use_transformer_engine_op_fuser`` and
  ``perf_plugins.py`` sets ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1``: TE's fused grouped MLP
  (`ExecutionOptions.moe_fused_grouped_mlp`); it sets ``fp8_dot_product_attention`` on
  ``mixed_precision``, which hands it to the model's ``TransformerConfig``: FP8 attention
  on the MXFP8 recipe's cuDNN ``mxfp8`` kernels (`ExecutionOptions.fp8_attention`).
  26.06.01 (v0.5.1) changes the B200 and B300 configs only; its GB300 and GB200 rows
  take these rules.

DeepSeek-V3 and Qwen3 235B-A22B dropless rows (`LARGE_MOE_RULES`), from the workload base
configs of each release (``scripts/performance/configs/deepseek/workload_base_configs.py``
at v0.2.0, ``deepseek_workload_base_configs.py`` from v0.3.0;
``configs/qwen3/workload_base_configs.py`` at v0.2.0, ``configs/qwen/
qwen3_workload_base_configs.py`` from v0.3.0). ``moe_flex_dispatcher_backend`` "hybridep" or
"deepep" becomes the flex dispatcher (``apply_flex_dispatcher_backend``); ``moe_a2a_overlap``
sets ``overlap_moe_expert_parallel_comm`` and ``delay_wgrad_compute``
(``utils/overrides.py`` ``_set_moe_a2a_overlap_overrides``), `ExecutionOptions.moe_a2a_overlap`.
- DeepSeek-V3: HybridEP on GB200 and GB300 from 25.11 (v0.2.0; graphs ``moe_router``,
  ``moe_preprocess``, plus ``attn`` on GB300), on every GPU from 26.02 (v0.3.0: GB200 captures
  ``attn``, ``moe_router``, ``moe_preprocess``; GB300's micro-batch-2 config none); B200 at
  25.11 sets no backend (alltoall). 26.04.01 (branch ``llmb-r0.4.1``) B200 MXFP8
  (``DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2``, pp 8, vpp 2, ep 32): DeepEP with the
  all-to-all overlap and ``attn``, ``moe_router``, ``moe_preprocess`` graphs. 26.06 (v0.5.0)
  GB300 and GB200 MXFP8 (``*_FP8_MX_V1``, and the ``_V2`` configs built from them): the
  all-to-all overlap under ``cuda_graph_impl="full_iteration"`` with the fused grouped MLP;
  GB300's also sets ``fp8_dot_product_attention``, GB200's does not. B300 at 26.04.01 and 26.06
  (``DEEPSEEK_V3_PRETRAIN_CONFIG_B300_V2``, pp 8, micro-batch 2, ``llmb-r0.4.1`` and v0.5.0):
  HybridEP with ``attn``, ``moe_router``, ``moe_preprocess`` graphs.
- Qwen3 235B-A22B: HybridEP on GB200 and GB300 in every release from 25.11 (graphs
  ``moe_router``, ``moe_preprocess``, plus ``attn`` on GB200 and, from v0.3.0's V2
  configs, on GB300); the all-to-all overlap with the alltoall dispatcher on B200 at 25.11
  and B300 at 26.02 and 26.02.01 (``QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_MX_V2`` at tag
  v0.3.0 and on branch ``llmb-r0.3.0``: pp 8, vpp 4, ep 8, micro-batch 1, ``moe_a2a_overlap``,
  no backend, no graphs; ``r0.3.0`` and v0.3.1 drop vpp and the overlap from 2026-03-10,
  commit 6f5e31aab, and v0.4.0, the 26.04 release, runs micro-batch 2 with neither);
  HybridEP on B300 at 26.04.01 (``llmb-r0.4.1``, also v0.5.0); 26.06
  GB300 and GB200 MXFP8 (``*_FP8_MX_V2``): the all-to-all overlap under
  ``full_iteration`` graphs with the fused grouped MLP and ``fp8_dot_product_attention``.
- H100 (``*_H100_*`` configs of every release; HEAD ``src/megatron/bridge/perf_recipes/
  {deepseek,qwen}/h100/``): DeepSeek-V3 at 25.11 DeepEP with the all-to-all overlap
  (``DEEPSEEK_V3_H100_BASE_CONFIG``: ``moe_flex_dispatcher_backend="deepep"``,
  ``moe_a2a_overlap``), 26.02 to 26.06 HybridEP without it (``DEEPSEEK_V3_PRETRAIN_CONFIG_
  H100_*``; HEAD's H100 recipe leaves the dispatcher to its base recipe, not covered);
  Qwen3 235B-A22B the alltoall dispatcher with the all-to-all overlap in every release from
  25.11 (``QWEN3_235B_A22B_H100_*``: ``moe_a2a_overlap``, no backend; HEAD
  ``qwen3_235b_a22b_pretrain_256gpu_h100_*_config``: ``moe_token_dispatcher_type="alltoall"``,
  ``overlap_moe_expert_parallel_comm``).
- Kimi-K2 GB300 (26.02.01 to 26.06; ``configs/kimi/kimi_workload_base_configs.py``
  ``KIMI_K2_PRETRAIN_CONFIG_GB300``): HybridEP, no graphs, no overlap.

Megatron-MoE model zoo Qwen3 235B-A22B rows (`moezoo_fields`; yanring/Megatron-MoE-ModelZoo
``best_practice/qwen3/readme.md`` at e8650517, GB200 and GB300 sections, and
``sbatch_benchmarking.sh``): every command sets ``DISPATCHER=hybridep``, which the script
turns into ``--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep``; the
sequence-4096 commands capture ``--cuda-graph-scope attn moe_router moe_preprocess`` and the
128K long-context command captures none; ``A2A_OVERLAP=1`` (``--overlap-moe-expert-parallel-comm
--delay-wgrad-compute``) in the MXFP8 sequence-4096 commands (GB200 and GB300), ``0`` in the
BF16 and long-context ones.
"""

from __future__ import annotations

TOKEN_DROP_CAPACITY_FACTOR = 1.0
"""``apply_moe_token_drop``'s default ``moe_expert_capacity_factor`` (module docstring)."""

ROUTER_SCOPES = frozenset(("moe_router", "moe_preprocess"))
"""The MoE CUDA graph scopes of every Megatron-Bridge Qwen3 30B-A3B recipe from 25.11."""

WHOLE_LAYER_25_09 = (("qwen3_30b_a3b", ("B200", "GB200")), ("qwen3_235b_a22b", ("GB200",)))
"""(model prefix, GPU types) of the 25.09 rows with ``cuda_graphs: true``."""

B200_ALLTOALL_RELEASES = ("MBRIDGE-25.11", "MBRIDGE-26.02")
"""Source ids (exact) whose Qwen3 30B-A3B B200 recipe keeps the alltoall dispatcher."""


FLEX: dict[str, object] = {"moe_dispatcher": "flex"}
ALLTOALL: dict[str, object] = {"moe_dispatcher": "alltoall"}
ATTN_ROUTER = ROUTER_SCOPES | {"attn"}
WHOLE_STEP = frozenset({"full_iteration"})

FUSED_MLP_RELEASE = "26.06"
"""Release prefix of the MXFP8 recipes with TE's fused grouped MLP (v0.5.0)."""
FUSED_MLP_30B_GPUS = ("GB300", "GB200", "B300")
"""GPU types of the 26.06 Qwen3 30B-A3B MXFP8 recipes with the fused grouped MLP."""
FUSED_MLP_STEP: dict[str, object] = FLEX | {
    "moe_a2a_overlap": True,
    "cuda_graph_scopes": WHOLE_STEP,
    "moe_fused_grouped_mlp": True,
}
"""`ExecutionOptions` fields of a 26.06 MXFP8 recipe with ``cutedsl_fused_grouped_mlp``
(module docstring)."""
FUSED_MLP_FP8_ATTENTION_STEP: dict[str, object] = FUSED_MLP_STEP | {"fp8_attention": True}
"""`FUSED_MLP_STEP` of a 26.06 MXFP8 recipe that also sets ``fp8_dot_product_attention``:
every one but DeepSeek-V3's on GB200 (module docstring)."""

LARGE_MOE_RULES: tuple[
    tuple[str, tuple[str, ...], tuple[str, ...], str, dict[str, object]], ...
] = (
    ("deepseekv3", ("26.06",), ("GB300",), "MXFP8", FUSED_MLP_FP8_ATTENTION_STEP),
    ("deepseekv3", ("26.06",), ("GB200",), "MXFP8", FUSED_MLP_STEP),
    (
        "deepseekv3",
        ("26.04.01",),
        ("B200",),
        "MXFP8",
        FLEX | {"moe_a2a_overlap": True} | {"cuda_graph_scopes": ATTN_ROUTER},
    ),
    ("deepseekv3", ("25.11",), ("GB300",), "", FLEX | {"cuda_graph_scopes": ATTN_ROUTER}),
    ("deepseekv3", ("25.11",), ("GB200",), "", FLEX | {"cuda_graph_scopes": ROUTER_SCOPES}),
    ("deepseekv3", ("25.11",), ("H100",), "", FLEX | {"moe_a2a_overlap": True}),
    ("deepseekv3", ("25.11",), ("B200", "B300"), "", ALLTOALL),
    ("deepseekv3", ("26.02", "26.04", "26.06"), ("H100",), "", FLEX),
    ("deepseekv3", ("26.04.01", "26.06"), ("B300",), "", FLEX | {"cuda_graph_scopes": ATTN_ROUTER}),
    ("deepseekv3", ("",), ("GB200",), "", FLEX | {"cuda_graph_scopes": ATTN_ROUTER}),
    ("deepseekv3", ("",), ("GB300", "B200", "B300"), "", FLEX),
    ("qwen3_235b", ("26.06",), ("GB300", "GB200"), "MXFP8", FUSED_MLP_FP8_ATTENTION_STEP),
    ("qwen3_235b", ("25.11",), ("GB300",), "", FLEX | {"cuda_graph_scopes": ROUTER_SCOPES}),
    ("qwen3_235b", ("",), ("GB300", "GB200"), "", FLEX | {"cuda_graph_scopes": ATTN_ROUTER}),
    ("qwen3_235b", ("25.11",), ("B200",), "", ALLTOALL | {"moe_a2a_overlap": True}),
    ("qwen3_235b", ("26.02",), ("B300",), "", ALLTOALL | {"moe_a2a_overlap": True}),
    ("qwen3_235b", ("26.04.01", "26.06"), ("B300",), "", FLEX),
    ("qwen3_235b", ("",), ("H100",), "", ALLTOALL | {"moe_a2a_overlap": True}),
    ("kimi_k2", ("",), ("GB300",), "", FLEX),
)
"""(model prefix, release prefixes ("" for any from 25.11), GPU types, precision prefix or ""
for any, `ExecutionOptions` fields), first match wins: the dropless Megatron-Bridge
DeepSeek-V3, Qwen3 235B-A22B and Kimi-K2 rows (module docstring). Rows no rule covers keep the
defaults (alltoall, eager)."""


DEEPSEEK_H100_25_09: dict[str, object] = FLEX | {"moe_a2a_overlap": True}
"""25.09 (tag v0.1.0rc4) ``scripts/performance/run_script.py``: DeepSeek-V3 on H100 runs
DeepEP (``enable_deepep``, dropless) with the all-to-all overlap (``A2A_1F1B``:
``overlap_moe_expert_parallel_comm`` and ``delay_wgrad_compute``)."""

QWEN3_30B_H100_RULES: tuple[tuple[str, str, dict[str, object]], ...] = (
    ("25.11", "", ALLTOALL | {"moe_a2a_overlap": True}),
    ("26.02", "", FLEX | {"moe_a2a_overlap": True}),
    ("26.08", "BF16", FLEX | {"moe_a2a_overlap": True}),
    ("26.08", "", FLEX | {"cuda_graph_scopes": ATTN_ROUTER}),
    ("", "", FLEX),
)
"""(release prefix, precision prefix or "" for any, `ExecutionOptions` fields), first match
wins: Megatron-Bridge's Qwen3 30B-A3B H100 recipes from 25.11 (16 GPUs). 25.11 (v0.2.0
``configs/qwen3/workload_base_configs.py`` ``QWEN3_30B_A3B_H100_*_BASE_CONFIG``): pp 2 vpp
12 ep 8, ``moe_a2a_overlap``, no dispatcher backend (alltoall); 26.02 (v0.3.0
``configs/qwen/qwen3_workload_base_configs.py`` ``QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_*_V1``):
the same with DeepEP; 26.04 and 26.06 (v0.4.0, v0.5.0): ep 16, HybridEP, no overlap; 26.08
(HEAD ``src/megatron/bridge/perf_recipes/qwen/h100/qwen3_moe.py``): BF16 HybridEP with
``overlap_moe_expert_parallel_comm``, FP8 HybridEP with ``attn``, ``moe_router`` and
``moe_preprocess`` graphs. Where a rule names no scopes, the BF16 recipes capture
``moe_router`` and ``moe_preprocess`` (``cuda_graph_impl="transformer_engine"``; HEAD's
base recipe ``recipes/qwen/h100/qwen3_moe.py``) and the FP8 ones none."""


def qwen3_30b_h100_fields(release: str, precision: str) -> dict[str, object]:
    """`QWEN3_30B_H100_RULES` fields of a Qwen3 30B-A3B H100 row of ``release`` (container
    id) printed with ``precision`` (upper case)."""
    for prefix, printed, rule in QWEN3_30B_H100_RULES:
        if release.startswith(prefix) and precision.startswith(printed):
            fields = dict(rule)
            if "cuda_graph_scopes" not in fields:
                bf16 = precision.startswith("BF16")
                fields["cuda_graph_scopes"] = ROUTER_SCOPES if bf16 else frozenset()
            return fields
    return {}


MOEZOO_SHORT_SEQUENCE = 4096
"""Sequence length of the model zoo's Qwen3 235B-A22B commands with CUDA graphs (module
docstring); its long-context command runs 131072 without them."""


def moezoo_fields(raw: dict[str, str]) -> dict[str, object]:
    """`ExecutionOptions` fields of a Megatron-MoE model zoo row's command (module docstring):
    the flex dispatcher always; ``attn``, ``moe_router`` and ``moe_preprocess`` graphs at
    sequence 4096; the all-to-all overlap in the MXFP8 commands at that sequence."""
    fields: dict[str, object] = dict(FLEX)
    if int(raw["seq_length"]) != MOEZOO_SHORT_SEQUENCE:
        return fields
    fields["cuda_graph_scopes"] = ATTN_ROUTER
    if raw["precision"].strip().upper().startswith("MXFP8"):
        fields["moe_a2a_overlap"] = True
    return fields


def large_moe_fields(raw: dict[str, str]) -> dict[str, object]:
    """`LARGE_MOE_RULES` fields of a dropless Megatron-Bridge DeepSeek-V3, Qwen3 235B or
    Kimi-K2 row from 25.11 on; empty otherwise."""
    source = raw["source_id"].strip()
    model, gpu = _model(raw), _gpu(raw)
    if not source.startswith("MBRIDGE-") or token_drop_capacity(raw) is not None:
        return {}
    release = source.removeprefix("MBRIDGE-")
    if release.startswith("25.09"):
        return {}
    precision = raw["precision"].strip().upper()
    for prefix, releases, gpus, precision_prefix, fields in LARGE_MOE_RULES:
        if (
            model.startswith(prefix)
            and any(release.startswith(r) for r in releases)
            and gpu in gpus
            and precision.startswith(precision_prefix)
        ):
            return dict(fields)
    return {}


def _model(raw: dict[str, str]) -> str:
    return raw["model"].strip().lower()


def _gpu(raw: dict[str, str]) -> str:
    return raw["gpu_type"].split("(")[0].strip().upper()


def token_drop_capacity(raw: dict[str, str]) -> float | None:
    """`ModelSpec.moe_capacity_factor` of a Megatron-Bridge row labelled ``(tokendrop)``;
    None (dropless) otherwise."""
    if raw["source_id"].startswith("MBRIDGE-") and "(tokendrop)" in _model(raw):
        return TOKEN_DROP_CAPACITY_FACTOR
    return None


def moe_runtime_fields(raw: dict[str, str]) -> dict[str, object]:
    """`ExecutionOptions` fields (``cuda_graph_scopes``, ``moe_dispatcher``,
    ``moe_a2a_overlap``, ``moe_fused_grouped_mlp``, ``fp8_attention``) a Megatron-Bridge or
    model zoo
    MoE row's recipe sets (module docstring); empty when the recipe sets none of them or the
    row is not covered."""
    source = raw["source_id"].strip()
    model, gpu = _model(raw), _gpu(raw)
    if source.startswith("MOEZOO-"):
        return moezoo_fields(raw)
    if source == "MBRIDGE-25.09":
        if model.startswith("deepseekv3") and gpu == "H100":
            return dict(DEEPSEEK_H100_25_09)
        for prefix, gpus in WHOLE_LAYER_25_09:
            if model.startswith(prefix) and gpu in gpus:
                return {"cuda_graph_scopes": frozenset({"layer"})}
        return {}
    if not source.startswith("MBRIDGE-") or not model.startswith("qwen3_30b_a3b"):
        return large_moe_fields(raw)
    if gpu == "H100":
        return qwen3_30b_h100_fields(source.removeprefix("MBRIDGE-"), raw["precision"].upper())
    if (
        source.removeprefix("MBRIDGE-").startswith(FUSED_MLP_RELEASE)
        and gpu in FUSED_MLP_30B_GPUS
        and "MX" in raw["precision"].upper()
    ):
        return dict(FUSED_MLP_FP8_ATTENTION_STEP)
    scopes = ROUTER_SCOPES
    if gpu == "B200" and source in B200_ALLTOALL_RELEASES:
        return {"cuda_graph_scopes": scopes, "moe_dispatcher": "alltoall"}
    if gpu in ("B200", "GB200") and "MX" not in raw["precision"].upper():
        scopes = scopes | {"attn"}
    return {"cuda_graph_scopes": scopes, "moe_dispatcher": "flex"}
