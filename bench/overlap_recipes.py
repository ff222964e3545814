"""The communication overlap a published row leaves to its recipe: gradient reduction and TP.

Whether the row's recipe overlaps the data-parallel gradient reduction with the backward
pass, whether it overlaps tensor-parallel communication with the GEMMs
(``--tp-comm-overlap``), and the userbuffers settings of that overlap, each read from the
recipe or the launch script of the row's source (files cited per entry). Nothing here
depends on the row's published figure.
"""

from __future__ import annotations

from norm_recipes import compute_dtype
from recipe_keys import matches, release_of, row_keys

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
    model, gpu, _ = row_keys(raw)
    release = release_of(source)
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
    """True when the row's recipe runs ``--tp-comm-overlap`` (`TP_COMM_OVERLAP_MODELS`, not
    in NVFP4: ``llama31_llm_pretrain.py`` and ``llama3_llm_pretrain.py`` set
    ``tp_comm_overlap = False if precision == "nvfp4"`` at tags v0.3.0 to v0.5.0) or its
    ``notes`` quote the flag as on (`TP_COMM_OVERLAP_FLAG`); it needs tp > 1 with sequence
    parallelism (Megatron-LM ``validate_args``)."""
    notes = raw.get("notes") or ""
    stated = TP_COMM_OVERLAP_FLAG in notes
    recipe = matches(raw, TP_COMM_OVERLAP_MODELS) and compute_dtype(raw) != "nvfp4"
    return tp > 1 and sequence_parallel and (stated or recipe)


PARAM_GATHER_NOT_OVERLAPPED: tuple[tuple[str, str, str, str], ...] = (
    ("26.06", "llama3.1_405b", "GB200", "NVFP4"),
)
"""(release, model prefix, GPU prefix, precision prefix) of the Megatron-Bridge rows whose
recipe turns the parameter all-gather overlap off: v0.5.0's
``llama31_405b_pretrain_config_gb200`` calls ``disable_param_gather_overlap`` for NVFP4 V2
(256 GPUs, global batch 1536; ``scripts/performance/configs/llama/llama31_llm_pretrain.py``,
"to reduce training peak memory and avoid OOM")."""


def param_gather_overlapped(raw: dict[str, str]) -> bool:
    """False for the rows of `PARAM_GATHER_NOT_OVERLAPPED`, True otherwise."""
    source = raw.get("source_id", "")
    if not source.startswith("MBRIDGE-"):
        return True
    model, gpu, precision = row_keys(raw)
    return not any(
        release_of(source) == release
        and model.startswith(prefix)
        and gpu.startswith(gpu_prefix)
        and precision.startswith(printed)
        for release, prefix, gpu_prefix, printed in PARAM_GATHER_NOT_OVERLAPPED
    )


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
    if not tp_comm_overlap or not matches(raw, TP_COMM_OVERLAP_MODELS):
        return {}
    fields: dict[str, object] = {"tp_overlap_bulk_sm_margin": False}
    if "FP8" in (raw.get("precision") or "").upper():
        fields["tp_overlap_rs_method"] = "ring_exchange"
    return fields
