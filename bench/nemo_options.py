"""What a NeMo 2.0 performance-recipe row ran beyond its printed plan: its execution options
(`nemo_option_fields`), per NeMo container (`nemo_keys.nemo_release`). The sources are those
`nemo_recipes` lists; its plan and model fields are `nemo_recipes`'.

- gradient reduction (``main_grad_bytes``): 25.07 on, ``helpers.py``
  ``set_precision_configs`` sets ``recipe.trainer.plugins.grad_reduce_in_fp32 = False`` for
  every run (2 bytes); before, the FP8 branch of every ``pretrain_*.py`` (25.02) or of
  ``utils.py`` ``set_primary_perf_configs`` (25.04) does, and the BF16 runs keep what the
  recipe's ``pretrain_performance_optimizations`` sets (`BF16_GRAD_FAMILIES`: False for
  Llama 3 / 3.1, GPT-3, Nemotron-4, Mixtral 8x7B, and Mixtral 8x22B in 25.02; the 64k
  Mixtral 8x22B recipe of 25.04 and DeepSeek-V3 keep ``bf16_mixed``'s fp32 reduction).
- FP8: the scripts' ``--fp8_recipe`` default ``ds`` (``argument_parser.py``) runs
  ``bf16_with_fp8_mixed`` (``fp8_recipe = "delayed"``, ``fp8_param_gather = True``;
  v2.2.0's ``fp8_params = True``, which ``MegatronMixedPrecision`` turns into
  ``fp8_param_gather``); a row printing current scaling runs
  ``bf16_with_fp8_current_scaling_mixed`` (``tensorwise``), MXFP8 ``bf16_with_mxfp8_mixed``,
  both with FP8 parameters. 25.04's ``set_primary_perf_configs`` turns FP8 parameters off
  under Megatron-FSDP ("FSDP does not support FP8 param gather"); later ones do not.
  Sub-channel scaling (``ss``, ``blockwise``) has no counterpart (`NotExpressible`).
- cross entropy: from 25.04, ``cross_entropy_fusion_impl = "te"`` (``utils.py`` /
  ``helpers.py`` ``set_perf_optimization_configs``) with ``GPTConfig.cross_entropy_loss_
  fusion = True`` (``gpt/model/base.py``); 25.02 leaves Megatron-core's ``native`` fused
  kernel.
- from 25.07: ``ddp.check_for_nan_in_grad = False`` (``grad_nan_check``), and BF16 runs set
  ``use_precision_aware_optimizer = True`` with the optimizer's default fp32 state dtypes.
- Megatron-FSDP runs (`nemo_recipes.nemo_plan_fields`) set
  ``gradient_accumulation_fusion = False`` (``set_mcore_fsdp_configs``).
- TP overlap userbuffers: Llama 3 70B, Llama 3.1 405B and GPT-3 175B pass the H100
  ``userbuffers_{bf16,fp8}_h100_*`` configurations, whose ``bulk`` overlaps set
  ``set_sm_margin=False`` and whose FP8 ``proj_fprop`` / ``fc2_fprop`` run
  ``RingExchangeOverlapCfg`` from 25.04 (``PipelineOverlapCfg`` in 25.02).
- DeepSeek-V3 on H100 from 25.07: ``moe_token_dispatcher_type = "flex"`` with DeepEP and
  ``moe_router_force_load_balancing`` (``pretrain_deepseek_v3.py``).
- CUDA graphs (`CUDA_GRAPH_FAMILIES`): ``cuda_graphs`` 1 is set on H100 only for
  Nemotron-H and Llama 4 (no preset); Nemotron-H's are the ``layer`` scope.
- allocator (`allocator_fields`): from 25.07 the launch of every H100 run sets
  ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (``expandable_segments``) but where
  NCCL user buffers are registered (`USER_BUFFER_FAMILIES`).
"""

from __future__ import annotations

from nemo_keys import fp8_row, fsdp_stated, model_family, nemo_release, on_h100
from recipe_keys import NotExpressible

BF16_GRAD_FAMILIES: tuple[tuple[str, str], ...] = (
    ("llama3", "25.02"),
    ("gpt3", "25.02"),
    ("nemotron4", "25.02"),
    ("mixtral8x7b", "25.02"),
)
"""(model family prefix, first release) of the BF16 recipes whose performance mode reduces
gradients in bf16 before 25.07: ``recipe.trainer.plugins.grad_reduce_in_fp32 = False`` in
``pretrain_performance_optimizations`` of ``recipes/llama3_8b.py``, ``llama3_70b.py``,
``llama31_405b.py``, ``gpt3_175b.py``, ``nemotron4_15b.py``, ``nemotron4_340b.py`` and
``mixtral_8x7b.py`` (v2.2.0 to v2.5.0rc0). Mixtral 8x22B is handled apart
(`main_grad_bytes`)."""


def main_grad_bytes(raw: dict[str, str], release: str) -> int:
    """Bytes per gradient element the row's scripts reduce (module docstring)."""
    if release >= "25.07" or fp8_row(raw):
        return 2
    family = model_family(raw)
    if family.startswith("mixtral8x22b"):
        # v2.2.0 runs recipes/mixtral_8x22b.py (performance mode: bf16 reduction); v2.3.0 on
        # run recipes/mixtral_8x22b_64k.py, whose performance mode keeps bf16_mixed's fp32.
        return 2 if release < "25.04" else 4
    return 2 if any(family.startswith(p) for p, _ in BF16_GRAD_FAMILIES) else 4


def fp8_fields(raw: dict[str, str], release: str, fsdp: bool) -> dict[str, object]:
    """``fp8_recipe`` and ``fp8_param`` of an FP8 row as its precision prints it (module
    docstring); empty for other rows."""
    if not fp8_row(raw):
        return {}
    text = (raw.get("precision") or "").upper()
    if "SS" in text.split("-") or "BLOCKWISE" in text or "SUB-CHANNEL" in text:
        raise NotExpressible("FP8 sub-channel (blockwise) scaling")
    if "MX" in text:
        recipe = "mxfp8"
    elif "CS" in text.split("-") or "CURRENT" in text:
        recipe = "tensorwise"
    else:
        recipe = "delayed"
    return {"fp8_recipe": recipe, "fp8_param": not (fsdp and release == "25.04")}


UB_H100_FAMILIES = ("llama370b", "llama3170b", "llama31405b", "llama3405b", "gpt3")
"""Model family prefixes whose scripts pass NeMo's H100 userbuffers configurations
(``pretrain_llama3_70b.py``, ``pretrain_llama31_405b.py``, ``pretrain_gpt3_175b.py``:
``userbuffers_{bf16,fp8}_h100_h8192_tp4_mbs1_seqlen8192``, ``..._h16384_tp8_cp2_...``,
``..._h12288_tp4_mbs1_seqlen2048``)."""


def userbuffers_fields(raw: dict[str, str], release: str) -> dict[str, object]:
    """TP-overlap userbuffers fields of `UB_H100_FAMILIES` rows on H100 (module docstring)."""
    if not on_h100(raw) or not model_family(raw).startswith(UB_H100_FAMILIES):
        return {}
    fields: dict[str, object] = {"tp_overlap_bulk_sm_margin": False}
    if fp8_row(raw) and release >= "25.04":
        fields["tp_overlap_rs_method"] = "ring_exchange"
    return fields


CUDA_GRAPH_FAMILIES: tuple[tuple[str, str], ...] = (("nemotronh", "25.07"),)
"""(model family prefix, first release) of the H100 configs with ``cuda_graphs`` 1 that a
preset prices: Nemotron-H 8B, 47B and 56B (``model_configs_h100.csv`` v2.4.0 and
v2.5.0rc0). ``helpers.py`` ``set_cuda_graph_configs`` sets ``model.config.enable_cuda_graph
= True`` (and ``use_te_rng_tracker``): Megatron-core's local implementation at its default
scope, whole layers (``layer``, as `moe_recipes` prices Megatron-Bridge's
``enable_cuda_graph``); ``set_perf_optimization_configs`` turns it off under Megatron-FSDP.
The cost model's host-launch term counts MoE launches only, so on these dense hybrids the
scope changes no priced term; it says what the run captured."""


def cuda_graph_fields(raw: dict[str, str], release: str, fsdp: bool) -> dict[str, object]:
    """``cuda_graph_scopes`` of a `CUDA_GRAPH_FAMILIES` row on H100 without Megatron-FSDP;
    empty otherwise."""
    family = model_family(raw)
    graphs = any(family.startswith(p) and release >= first for p, first in CUDA_GRAPH_FAMILIES)
    if not graphs or fsdp or not on_h100(raw):
        return {}
    return {"cuda_graph_scopes": frozenset({"layer"})}


EXPANDABLE_SEGMENTS_RELEASE = "25.07"
"""The first NeMo container whose performance launch sets expandable allocator segments:
``scripts/performance/executors.py`` ``slurm_executor`` (v2.4.0 and v2.5.0rc0) puts
``PYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True"`` in ``PERF_ENV_VARS`` for every
``--gpu`` but ``b200`` ("it causes an unexpected error" there), and every ``pretrain_*.py``
launches through it; ``PerfEnvPlugin.setup`` (``nemo/lightning/run/plugins.py``) removes it
again when the run registers NCCL user buffers ("not currently compatible with user buffer
registration"). v2.3.0's ``scripts/performance/utils.py`` and v2.2.0's
``scripts/llm/performance/utils.py`` set no allocator configuration (v2.3.0's Llama 4 E16
script sets it itself, a model no preset expresses)."""

USER_BUFFER_FAMILIES = ("llama38b",)
"""Model family prefixes of the FP8 H100 configs that register NCCL user buffers, so that
``PerfEnvPlugin(user_buffer_registration=True)`` removes the expandable segments: the
Llama 3 8B FP8 row of ``model_configs_h100.csv`` (``use_user_buffer_registration`` 1, v2.4.0
and v2.5.0rc0; no other H100 ``pre_train`` row sets it), which ``pretrain_llama3_8b.py``
passes to the plugin."""


def allocator_fields(raw: dict[str, str], release: str) -> dict[str, object]:
    """``expandable_segments`` True for an H100 row of 25.07 on (`EXPANDABLE_SEGMENTS_RELEASE`)
    but the FP8 configs with NCCL user buffers (`USER_BUFFER_FAMILIES`); empty otherwise
    (rows of other GPUs read other configuration files, which this module does not)."""
    if release < EXPANDABLE_SEGMENTS_RELEASE or not on_h100(raw):
        return {}
    if fp8_row(raw) and model_family(raw).startswith(USER_BUFFER_FAMILIES):
        return {}
    return {"expandable_segments": True}


def nemo_option_fields(raw: dict[str, str], tp_comm_overlap: bool) -> dict[str, object]:
    """`ExecutionOptions` fields of a NeMo 2.0 performance-recipe row (module docstring),
    ``tp_comm_overlap`` being its plan's; empty for other rows."""
    release = nemo_release(raw)
    if release is None:
        return {}
    fsdp = fsdp_stated(raw)
    fields: dict[str, object] = {
        "main_grad_bytes": main_grad_bytes(raw, release),
        "cross_entropy_fusion": "te" if release >= "25.04" else "native",
        **fp8_fields(raw, release, fsdp),
    }
    if release >= "25.07":
        fields["grad_nan_check"] = False
        if not fp8_row(raw):
            fields["precision_aware_optimizer"] = True
    if fsdp:
        fields["grad_accumulation_fusion"] = False
    if tp_comm_overlap:
        fields.update(userbuffers_fields(raw, release))
    if model_family(raw).startswith("deepseekv3") and on_h100(raw) and release >= "25.07":
        fields["moe_dispatcher"] = "flex"
    fields.update(cuda_graph_fields(raw, release, fsdp))
    fields.update(allocator_fields(raw, release))
    return fields
