"""What a Megatron-Bridge MoE row's recipe ran beyond its printed plan: CUDA graph capture,
the token dispatcher and token dropping, per release (`moe_runtime_fields`,
`token_drop_capacity`).

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
    """`ExecutionOptions` fields (``cuda_graph_scopes``, ``moe_dispatcher``) a Megatron-Bridge
    MoE row's recipe sets (module docstring); empty when the recipe sets none of them or the
    row is not covered."""
    source = raw["source_id"].strip()
    model, gpu = _model(raw), _gpu(raw)
    if source == "MBRIDGE-25.09":
        for prefix, gpus in WHOLE_LAYER_25_09:
            if model.startswith(prefix) and gpu in gpus:
                return {"cuda_graph_scopes": frozenset({"layer"})}
        return {}
    if not source.startswith("MBRIDGE-") or not model.startswith("qwen3_30b_a3b"):
        return {}
    scopes = ROUTER_SCOPES
    if gpu == "B200" and source in B200_ALLTOALL_RELEASES:
        return {"cuda_graph_scopes": scopes, "moe_dispatcher": "alltoall"}
    if gpu in ("B200", "GB200") and "MX" not in raw["precision"].upper():
        scopes = scopes | {"attn"}
    return {"cuda_graph_scopes": scopes, "moe_dispatcher": "flex"}
