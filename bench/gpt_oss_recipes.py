"""What a Megatron-Bridge GPT-OSS 120B row's recipe ran beyond its printed plan, per release:
CUDA graph scopes, selective recompute, the token dispatcher, the all-to-all overlap, the
fused expert MLP and the rotary-embedding path (`gpt_oss_runtime_fields`,
`gpt_oss_saver_fields`).

Sources (NVIDIA-NeMo/Megatron-Bridge ``scripts/performance/configs/gpt_oss/``:
``workload_base_configs.py`` at v0.2.x, ``gpt_oss_workload_base_configs.py`` from v0.3.0,
with ``gpt_oss_llm_pretrain.py`` beside them; the printed rows run the ``*_V2`` configs,
global batch 1280, except 25.11):
- every GPU and release: ``GB300`` and ``B300`` capture ``attn``, ``moe_router`` and
  ``moe_preprocess`` with ``cuda_graph_impl="transformer_engine"``; ``GB200``, ``B200`` and
  ``H100`` recompute ``layernorm`` and ``moe_act`` (``recompute_modules``, which
  ``_set_recompute_overrides`` turns into ``recompute_granularity="selective"``). 25.11
  (v0.2.0) sets the same per GPU, although its printed plans (sequence 8192 on GB200/GB300,
  EP 8 on B200) are not that release's configs (`row_recipes.PRINTED_NOT_RECIPE`).
- token dispatcher and overlap: 25.11 to 26.02.01 (v0.2.0, v0.3.0, branch r0.3.0) run the
  alltoall dispatcher: r0.3.0's B200/B300 configs name ``moe_flex_dispatcher_backend=
  "hybridep"``, but its ``gpt_oss_llm_pretrain.py`` and ``set_workload_base_configs`` never
  apply that field. 26.04 (v0.4.0, whose ``gpt_oss_llm_pretrain.py`` calls
  ``apply_flex_dispatcher_backend``): HybridEP (the flex dispatcher) on GB200, B300 and
  B200, with ``moe_a2a_overlap`` on GB200. 26.04.01 (branch llmb-r0.4.1, the configs of
  r0.4.0): alltoall with ``moe_a2a_overlap`` on GB200, alltoall on B200, HybridEP on B300.
- 26.06 (v0.5.0) MXFP8: GB300 and GB200 (``*_FP8_MX_V2``) run ``cuda_graph_impl=
  "full_iteration"``, HybridEP, ``moe_a2a_overlap``, ``cutedsl_fused_grouped_mlp``
  (``use_transformer_engine_op_fuser``) and ``fp8_dot_product_attention`` (FP8 attention
  on the MXFP8 recipe's cuDNN ``mxfp8`` kernels), GB200 with ``recompute_modules=[]``;
  B300's MXFP8 config is its BF16 V2 config (graphs as above, HybridEP, bf16 attention).
  26.06.01 (v0.5.1) keeps these configs. The full-iteration recipe's
  per-rank capacity of 1.5x the mean rows (``set_full_iter_cg_configs``:
  ``moe_expert_rank_capacity_factor = 1.5``) sizes the dispatch buffers and drops nothing
  under forced balance; the fused expert MLP multiplies only the routed rows (the
  per-expert counts go to the fused ops as a device tensor, ``TEGroupedMLP`` in the
  Megatron-core v0.5.0 pins), so it adds no time.
- every release: ``GPTOSSProvider`` uses YaRN rotary embeddings without ``yarn_mscale``
  (``src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py``), for which Megatron-core
  runs the unfused RoPE although the performance overrides set ``apply_rope_fusion``
  (`costmodel.runtimes.megatron.unfused_costs`): ``rope_fusion`` False.
"""

from __future__ import annotations

ATTN_ROUTER = frozenset({"attn", "moe_router", "moe_preprocess"})
"""The TE CUDA graph scopes of the GB300 and B300 recipes."""

SELECTIVE_LAYERNORM_MOE_ACT: dict[str, object] = {
    "recompute": "selective",
    "recompute_modules": ("layernorm", "moe_act"),
}
"""The GB200 and B200 recipes' recompute (module docstring)."""

DISPATCH_RULES: tuple[tuple[tuple[str, ...], str, dict[str, object]], ...] = (
    (("26.04.01",), "GB200", {"moe_a2a_overlap": True}),
    (("26.04.01", "26.06"), "B300", {"moe_dispatcher": "flex"}),
    (("26.04.01",), "", {}),
    (("26.04",), "GB200", {"moe_dispatcher": "flex", "moe_a2a_overlap": True}),
    (("26.04",), "B", {"moe_dispatcher": "flex"}),
)
"""(container prefixes, GPU prefix, `ExecutionOptions` fields), first match wins: the
dispatcher and all-to-all overlap of the BF16 recipes and of 26.06's B300 (module
docstring); releases no rule covers run the alltoall dispatcher without overlap."""

FULL_ITERATION_MXFP8: dict[str, object] = {
    "cuda_graph_scopes": frozenset({"full_iteration"}),
    "moe_dispatcher": "flex",
    "moe_a2a_overlap": True,
    "moe_fused_grouped_mlp": True,
    "fp8_attention": True,
}
"""26.06's GB300 and GB200 MXFP8 recipes (module docstring)."""


def _keys(raw: dict[str, str]) -> tuple[str, str, str] | None:
    """(container, GPU, printed precision) of a Megatron-Bridge GPT-OSS row, else None."""
    source = (raw.get("source_id") or "").strip()
    if not source.startswith("MBRIDGE-") or "gpt oss" not in (raw.get("model") or "").lower():
        return None
    gpu = (raw.get("gpu_type") or "").split("(")[0].strip().upper()
    return source.removeprefix("MBRIDGE-"), gpu, (raw.get("precision") or "").strip().upper()


def _full_iteration(container: str, gpu: str, precision: str) -> bool:
    return container.startswith("26.06") and gpu in ("GB300", "GB200") and "MX" in precision


def gpt_oss_runtime_fields(raw: dict[str, str]) -> dict[str, object]:
    """`ExecutionOptions` fields of a Megatron-Bridge GPT-OSS row's recipe (module
    docstring); empty for other rows."""
    keys = _keys(raw)
    if keys is None:
        return {}
    container, gpu, precision = keys
    fields: dict[str, object] = {"rope_fusion": False}
    if _full_iteration(container, gpu, precision):
        return fields | FULL_ITERATION_MXFP8
    if gpu in ("GB300", "B300"):
        fields["cuda_graph_scopes"] = ATTN_ROUTER
    for releases, gpu_prefix, rule in DISPATCH_RULES:
        if container.startswith(releases) and gpu.startswith(gpu_prefix):
            return fields | rule
    return fields


def gpt_oss_saver_fields(raw: dict[str, str]) -> dict[str, object]:
    """`ParallelPlan` recompute fields of a Megatron-Bridge GPT-OSS row's recipe: selective
    ``layernorm`` and ``moe_act`` on GB200, B200 and H100 except under 26.06's full-iteration
    MXFP8 recipe; empty otherwise."""
    keys = _keys(raw)
    if keys is None or _full_iteration(*keys):
        return {}
    return dict(SELECTIVE_LAYERNORM_MOE_ACT) if keys[1] in ("GB200", "B200", "H100") else {}
