"""One place that turns a row of ``published-runs-dev.csv`` into what `estimate_plan` takes.

A row states a model shape, a cluster, a plan, a precision, an optimizer sharding and a
recompute setting; `case_for_row` maps exactly those onto `ModelSpec`, `ClusterSpec`,
`TrainingJob`, `ParallelPlan` and the framework's `ExecutionOptions`, and raises
`NotExpressible` with the reason when a field has no counterpart (NVFP4, hybrid Mamba
layers, a virtual pipeline degree nobody published (such rows are priced apart at every
admitted degree, `bench/unstated_vpp.py`), ...). Plan settings a row states only in its
``notes`` (an uneven first/last stage, all-gather context parallelism) are read from them
(`stated_note_fields`). What a row leaves to its recipe (uneven pipeline splits, TP
overlap, expert TP, MTP layers, GPT-OSS attention, Megatron-FSDP sharding) and what no plan
expresses (LoRA, DeepSpeed ZeRO-3, figures the source flags as a regression) comes from the
recipe files cited in `bench/row_recipes.py`. Nothing here filters rows by name.

Defaults for what a row leaves empty, each the framework's own default (column guide:
``published-runs-dev.md``):
- micro-batch size 1 (Megatron-LM ``--micro-batch-size`` default);
- ffn 4·h for GPT-style rows (Megatron-LM ``--ffn-hidden-size`` default);
- MHA when ``num_query_groups`` is empty (Megatron-LM without ``--group-query-attention``);
- no recompute, no sequence parallelism beyond what the row states; Megatron-Bridge and
  NeMo rows run the distributed optimizer (their performance recipes set
  ``use_distributed_optimizer``), other rows only when ``fsdp_or_zero`` says so;
  Megatron-Bridge's Kimi-K2 rows run layer-wise distributed Muon instead
  (`bench/optimizer_recipes.py`), every other row Adam;
- precision bf16 when the row does not state one; fp16 rows are priced as bf16 (same
  dense peak); FP8 in any scaling recipe (delayed, current, blockwise, MXFP8) as fp8.

The execution options are those of the row's software era (`row_era`, `bench/row_era.py`):
dated from the stack versions, arXiv identifier or year the row states, `MEGATRON_2021`
before FlashAttention reached Megatron-LM (2023-01), FlashAttention-2-class attention before
Transformer Engine v1.11 brought FlashAttention-3 (2024-10), Megatron-LM's current defaults
after it or without a date; Megatron-Bridge rows, NeMo 2.0 rules and `MEGATRON_2023_STACKS`
are more specific and come first, and `ERA_BY_SOURCE` names the sources whose text does not
date their stack.

The published figure is turned into seconds per iteration (`published_iteration_time_s`):
the printed iteration time, else global batch x sequence / (tokens/s/GPU x GPUs), else the
printed TFLOP/s/GPU through the source's own FLOPs convention.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass

from gpt_oss_recipes import gpt_oss_runtime_fields, gpt_oss_saver_fields
from moe_recipes import moe_runtime_fields, token_drop_capacity
from nemo_recipes import nemo_model_fields, nemo_option_fields, nemo_plan_fields
from norm_recipes import norm_backend_fields
from optimizer_recipes import optimizer_plan_fields, row_optimizer
from overlap_recipes import grad_reduce_overlapped, tp_overlap, userbuffers_fields
from pipeline_recipes import pipeline_fields
from precision_recipes import fp8_weight_fields, grad_sync_fields, optimizer_precision_fields
from recipe_keys import NotExpressible
from row_era import Era, RowDate, era_for, era_options, era_plan_fields, row_date
from row_recipes import (
    expandable_segments,
    expert_tp,
    mtp_layers,
    refusal,
    sharding_fields,
    sliding_window_fields,
    untied_embeddings,
)
from saver_recipes import saver_fields

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS, MEGATRON_2023
from costmodel.flops import (
    core_attention_forward_flops_per_token,
    model_flops_per_iteration,
    sc21_flops_per_iteration,
)
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

PROFILE_BY_GPU = (
    ("A100-SXM4-40GB", "a100-sxm-40gb"),
    ("A100", "a100-sxm-80gb"),
    ("H800", None),
    ("H100", "h100-sxm-80gb"),
    ("GB200", "gb200-nvl72"),
    ("GB300", "gb300-nvl72"),
    ("B300", "b300"),
    ("B200", "b200"),
)
"""``gpu_type`` prefix -> stored profile, first match wins; None: no stored profile yet.
A100 rows that do not print the memory size (MegaScale) use the 80 GB profile."""

GENERATION_BY_GPU = (("A100", "A100"), ("H100", "H100/H800"), ("H800", "H100/H800"))
"""``gpu_type`` prefix -> GPU generation of the summaries; anything else is Blackwell."""

ERA_BY_SOURCE: tuple[tuple[str, Era], ...] = (("BLOOM-", "megatron_2021"), ("LLAMA3-", "current"))
"""``source_id`` prefix -> era (`bench/row_era.py`), for the sources whose own text does not
date their stack:
- BLOOM-176B prints no date (its ``source``, ``source_locator`` and ``source_version`` name
  repository paths only; its notes, a Megatron-DeepSpeed fork): the 2021 options it has
  always been priced with;
- Llama 3 (arXiv 2407.21783, 2024-07) ran Meta's own stack (the rows' notes: NCCLX
  collectives, all-gather context parallelism), not a Megatron-LM, NeMo or Transformer
  Engine release, whose dates the FlashAttention thresholds are: it keeps the current
  defaults it was validated with. Its date would select FlashAttention-2-class attention,
  which moves its unstated-vpp errors (`bench/unstated_vpp.py`) by +1 to +23 points.
Every other row's era is its date's (`row_era`)."""

ARCHITECTURE_COLUMNS = (
    "arch_notes",
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "ffn_hidden_size",
    "vocab_size",
    "num_experts",
    "moe_top_k",
    "moe_ffn_hidden_size",
    "moe_shared_expert_ffn",
)
"""Columns of ``published-runs-dev.csv`` that describe the model (what `model_for` reads):
a row built for a recipe copies them from a dev-set row of the same model."""

DISTRIBUTED_OPTIMIZER_SOURCES = ("MBRIDGE-", "NEMO-", "MOEZOO-", "NEMOTRON4-")
"""Sources whose recipes run the distributed optimizer when ``fsdp_or_zero`` is empty."""


FlopsFormula = Callable[[ModelSpec, int, int], float]
"""FLOPs of one iteration from (model, sequence length, global batch)."""


MEGATRON_BRIDGE_PERF = dataclasses.replace(
    DEFAULT_OPTIONS, main_grad_bytes=2, cross_entropy_fusion="te"
)
"""Megatron-Bridge's performance scripts (NVIDIA-NeMo/Megatron-Bridge
``scripts/performance/utils/helpers.py``, ``set_basic_perf_overrides``) set
``mixed_precision.grad_reduce_in_fp32 = False`` and ``ddp.grad_reduce_in_fp32 = False``:
bf16 main gradients and bf16 gradient reduction (2 bytes per element). Applied to every
MBRIDGE release; releases whose helper predates the override ran fp32 gradients. The loss
runs Transformer Engine's fused cross entropy (`ExecutionOptions.cross_entropy_fusion`
``te``) in every release: ``GPTProvider.cross_entropy_loss_fusion = True``
(``src/megatron/bridge/models/gpt_provider.py``) with ``cross_entropy_fusion_impl: "te"``
in the 25.09 performance configs (tag v0.1.0rc4, ``scripts/performance/configs/*/
*_llm_pretrain.yaml``) and in the common performance overrides from 25.11 on
(``utils/helpers.py`` at v0.2.x, ``utils/overrides.py`` ``_set_common_perf_overrides``
from v0.3.0); the containers of those releases ship Transformer Engine before v2.18
(v0.2.0 pins ``>=2.9.0a0,<2.10.0``, v0.3.0 ``<2.13.0``; v2.18 was tagged after v0.5.0,
the 26.06 release)."""


MEGATRON_2023_STACKS = ("Megatron-LM commit 285068c8",)
"""``source_version`` markers of Megatron-LM of early 2023 (`MEGATRON_2023` options; no
`--overlap-grad-reduce` yet, so the gradient all-reduce follows the pipeline)."""


TE1_DEFAULT_UB_STACKS = ("Megatron-Core r0.8.0",)
"""``source_version`` markers of Megatron-LM stacks that overlap TP communication with
Transformer Engine 1.x's default userbuffers configuration: Megatron-LM r0.8.0 passes
``ub_cfgs = {}`` to ``initialize_ub`` without ``--tp-comm-overlap-cfg``
(``megatron/training/initialize.py``, ``_initialize_tp_communicators``), and TE before
v2.0 (2025-02) then registers every method with ``set_sm_margin`` 0 (``add_ub`` default,
``transformer_engine/pytorch/module/base.py`` v1.7 to v1.13): the ``bulk`` and
``pipeline`` GEMMs keep every SM (`PRE_TE2_USERBUFFERS`). NeMo stacks pass their own
userbuffers configurations and are not listed."""

PRE_TE2_USERBUFFERS = {"tp_overlap_bulk_sm_margin": False, "tp_overlap_pipeline_sm_margin": False}
"""`ExecutionOptions` userbuffers fields of `TE1_DEFAULT_UB_STACKS`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RowCase:
    """One published run as `estimate_plan` inputs."""

    model: ModelSpec
    cluster: ClusterSpec
    job: TrainingJob
    plan: ParallelPlan
    options: ExecutionOptions
    profile: str
    """Stored profile name."""
    generation: str
    """A100, H100/H800 or Blackwell."""


def _text(raw: dict[str, str], key: str) -> str:
    return (raw.get(key) or "").strip()


def _int(raw: dict[str, str], key: str, default: int | None = None) -> int:
    """An integer column; empty or ``n/a`` gives ``default`` (NotExpressible when None)."""
    text = _text(raw, key)
    if text in ("", "n/a"):
        if default is None:
            raise NotExpressible(f"{key} not stated")
        return default
    if not re.fullmatch(r"\d+", text):
        raise NotExpressible(f"{key} = {text!r} is not a number")
    return int(text)


def _float(raw: dict[str, str], key: str) -> float | None:
    text = _text(raw, key)
    try:
        return float(text) if text else None
    except ValueError:
        return None


def gpu_generation(gpu_type: str) -> str:
    """A100, H100/H800 or Blackwell, from the ``gpu_type`` column."""
    return next((g for prefix, g in GENERATION_BY_GPU if gpu_type.startswith(prefix)), "Blackwell")


def profile_for(gpu_type: str) -> str:
    """The stored profile of a ``gpu_type``; NotExpressible when none is stored yet."""
    for prefix, name in PROFILE_BY_GPU:
        if gpu_type.startswith(prefix):
            if name is None:
                raise NotExpressible(f"no stored profile for {prefix}")
            return name
    raise NotExpressible(f"no stored profile for {gpu_type!r}")


def precision_for(text: str) -> str:
    """The job precision of a ``precision`` column (see the module docstring)."""
    upper = text.upper()
    if "NVFP4" in upper:
        raise NotExpressible("NVFP4 precision")
    if "FP8" in upper or "QUANTIZATION GRANULARITY" in upper:
        return "fp8"
    return "bf16"


def _architecture(raw: dict[str, str]) -> dict[str, object]:
    """ModelSpec style fields from ``arch_notes``; NotExpressible for layers not modelled."""
    notes = _text(raw, "arch_notes").lower()
    model = _text(raw, "model").lower()
    if "sliding-window" in notes and not sliding_window_fields(raw):
        raise NotExpressible("sliding-window attention outside GPT-OSS")
    for marker, reason in (
        ("parallel attn", "parallel attention+MLP block"),
        ("parallel transformer block", "parallel transformer block"),
    ):
        if marker in notes:
            raise NotExpressible(reason)
    if "nemotron_3" in model:
        raise NotExpressible("hybrid Mamba layers")
    if "relu" in notes and "squared-relu" not in notes:
        raise NotExpressible("ReLU MLP")
    gated = any(k in notes for k in ("swiglu", "llama", "experts")) or "mla" in notes
    if gated:
        return {"activation": "swiglu", "normalization": "rmsnorm", "position_embedding": "rope"}
    if "squared-relu" in notes:
        # Non-gated two-matrix MLP: the same GEMMs as GELU (`specs.presets` Nemotron-4).
        return {"activation": "gelu", "normalization": "layernorm", "position_embedding": "rope"}
    position = "none" if "alibi" in notes else "learned"
    return {
        "activation": "gelu",
        "normalization": "layernorm",
        "position_embedding": position,
        "tied_embeddings": not untied_embeddings(raw),
    }


def _mla(raw: dict[str, str]) -> dict[str, object]:
    """DeepSeek-V3-style MLA and dense-layer fields (deepseek-ai/DeepSeek-V3 config.json)."""
    notes = _text(raw, "arch_notes").lower()
    if "mla" not in notes:
        return {}
    dense = 3 if "first 3 layers dense" in notes else 1 if "first layer dense" in notes else 0
    return {
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_head_dim": 128,
        "qk_pos_emb_head_dim": 64,
        "v_head_dim": 128,
        "moe_first_dense_layers": dense,
    }


QK_LAYERNORM_FAMILIES = ("qwen3",)
"""Model names (lower case, prefix) whose architecture normalizes each head's query and
key: Qwen3 dense and MoE (Megatron-Bridge ``models/qwen/qwen3_bridge.py`` and
``qwen3_moe_bridge.py`` set ``provider.qk_layernorm = True``)."""


def uses_qk_layernorm(raw: dict[str, str]) -> bool:
    """Whether the row's model has query/key norms (`QK_LAYERNORM_FAMILIES`)."""
    return _text(raw, "model").lower().startswith(QK_LAYERNORM_FAMILIES)


def model_for(raw: dict[str, str]) -> ModelSpec:
    """The row's `ModelSpec` from its architecture columns."""
    hidden = _int(raw, "hidden_size")
    heads = _int(raw, "num_attention_heads")
    style = {**_architecture(raw), **sliding_window_fields(raw)}
    kv = re.search(r"kv_channels (\d+)", _text(raw, "arch_notes"))
    experts = _int(raw, "num_experts", 0)
    moe: dict[str, object] = {}
    if experts:
        moe = {
            "num_experts": experts,
            "moe_top_k": _int(raw, "moe_top_k"),
            "moe_ffn_hidden_size": _int(raw, "moe_ffn_hidden_size"),
            "moe_shared_expert_size": _int(raw, "moe_shared_expert_ffn", 0),
            "moe_capacity_factor": token_drop_capacity(raw),
        }
    ffn_default = 4 * hidden if style["activation"] == "gelu" else None
    if experts:
        ffn_default = int(moe["moe_ffn_hidden_size"])
    ffn = _int(raw, "ffn_hidden_size", ffn_default)
    spec = ModelSpec(
        name=_text(raw, "model"),
        num_layers=_int(raw, "num_layers"),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_query_groups=_int(raw, "num_query_groups", heads),
        kv_channels=int(kv.group(1)) if kv else None,
        ffn_hidden_size=ffn,
        vocab_size=_int(raw, "vocab_size"),
        max_position_embeddings=_int(raw, "seq_length"),
        **style,
        mtp_num_layers=mtp_layers(raw),
        qk_layernorm=uses_qk_layernorm(raw),
        **moe,
        **_mla(raw),
    )
    nemo = nemo_model_fields(raw)
    if not experts:
        nemo.pop("moe_capacity_factor", None)
    return dataclasses.replace(spec, **nemo) if nemo else spec


def _distributed_optimizer(raw: dict[str, str]) -> bool:
    text = _text(raw, "fsdp_or_zero")
    lower = text.lower()
    if "fairscale" in lower:
        raise NotExpressible(f"optimizer sharding {text!r}")
    if not text:
        return _text(raw, "source_id").startswith(DISTRIBUTED_OPTIMIZER_SOURCES)
    # ZeRO-1 and FSDP without parameter resharding shard the optimizer state as the
    # distributed optimizer does.
    return any(k in lower for k in ("distributed optimizer", "zero-1", "fsdp"))


def _recompute(raw: dict[str, str]) -> str:
    text = _text(raw, "recompute").lower()
    if text.startswith("full"):
        return "full"
    if text.startswith("selective"):
        return "selective"
    return "none"


VPP_NOT_STATED = "virtual pipeline degree not stated"
"""The `NotExpressible` reason of a row that runs the interleaved schedule without printing
its degree (`vpp_stated`); `bench/unstated_vpp.py` prices such rows at every degree."""

ONE_FEWER_LAYER_NOTE = "first/last stage have one fewer layer"
"""A ``notes`` statement (Llama 3, arXiv 2407.21783 Sec. 3.3: one transformer layer fewer
on the first and on the last pipeline stage): the split of Megatron's two account-for flags,
(L + 2) / (pp·vpp) layers per virtual stage with the first and the last one building one
layer fewer (`specs.pipeline_split`). Equal first/last counts (L + 2) / pp - 1 would put
the missing layer on the whole first and last rank and admit no vpp > 1 for 126 layers over
16 ranks (7 per end rank is a multiple of no degree that also divides the middle ranks' 8)."""

ALL_GATHER_CP_NOTE = "cp is all-gather based"
"""A ``notes`` statement (Llama 3): context parallelism gathers K and V across the group
instead of passing them round a ring (`ParallelPlan.cp_comm_type` ``all_gather``)."""


def vpp_stated(raw: dict[str, str]) -> bool:
    """False when the row runs the interleaved schedule without printing its degree: ``vpp``
    reads "interleaved ...", or is empty while ``notes`` name an interleaved schedule."""
    vpp = _text(raw, "vpp")
    interleaved_note = "interleaved schedule" in _text(raw, "notes").lower()
    return "interleaved" not in vpp and not (interleaved_note and not vpp)


def stated_note_fields(raw: dict[str, str], pp: int, cp: int) -> dict[str, object]:
    """Plan fields the row's ``notes`` state (`ONE_FEWER_LAYER_NOTE`,
    `ALL_GATHER_CP_NOTE`); empty for rows without those statements."""
    notes = _text(raw, "notes").lower()
    fields: dict[str, object] = {}
    if ONE_FEWER_LAYER_NOTE in notes and pp > 1:
        fields["account_for_embedding_in_pipeline_split"] = True
        fields["account_for_loss_in_pipeline_split"] = True
    if ALL_GATHER_CP_NOTE in notes and cp > 1:
        fields["cp_comm_type"] = "all_gather"
    return fields


def plan_for(raw: dict[str, str], model: ModelSpec) -> ParallelPlan:
    """The row's `ParallelPlan` (tp pp vpp cp ep dp, mbs, recompute, optimizer sharding)."""
    if not vpp_stated(raw):
        raise NotExpressible(VPP_NOT_STATED)
    tp, pp = _int(raw, "tp", 1), _int(raw, "pp", 1)
    vpp, cp = _int(raw, "vpp", 1), _int(raw, "cp", 1)
    ep = _int(raw, "ep", 1) if model.num_experts else 1
    gpus = _int(raw, "num_gpus")
    sp_text = _text(raw, "sequence_parallel").lower()
    fields: dict[str, object] = {
        "tp": tp,
        "pp": pp,
        "vpp": vpp,
        "cp": cp,
        "ep": ep,
        "micro_batch_size": _int(raw, "micro_batch_size", 1),
        "recompute": _recompute(raw),
        "distributed_optimizer": _distributed_optimizer(raw),
        "sequence_parallel": tp > 1 and not sp_text.startswith("no"),
        "etp": expert_tp(raw, model) if ep > 1 else None,
        "tp_comm_overlap": tp_overlap(raw, tp, tp > 1 and not sp_text.startswith("no")),
        **pipeline_fields(raw, model, pp, vpp),
        **(sharding_fields(raw) or {}),
        **optimizer_plan_fields(raw),
        **stated_note_fields(raw, pp, cp),
    }
    fields.update(saver_fields(raw, pp, bool(fields.get("use_megatron_fsdp"))))
    fields.update(gpt_oss_saver_fields(raw))
    fields.update(nemo_plan_fields(raw, model, fields))
    if any(m in _text(raw, "source_version") for m in MEGATRON_2023_STACKS):
        fields["overlap_grad_reduce"] = False
    else:
        era, date = row_era(raw)
        fields.update(era_plan_fields(era, date, pp, bool(fields["distributed_optimizer"])))
        if not grad_reduce_overlapped(raw):
            fields["overlap_grad_reduce"] = False
            fields["overlap_param_gather"] = False
    return ParallelPlan.for_world(gpus, **fields)


def options_for_row(raw: dict[str, str], plan: ParallelPlan | None = None) -> ExecutionOptions:
    """`MEGATRON_BRIDGE_PERF` for Megatron-Bridge rows, `MEGATRON_2023` for
    `MEGATRON_2023_STACKS`, otherwise the options of the row's era (`row_era`:
    `MEGATRON_2021` before FlashAttention, FlashAttention-2-class attention before
    FlashAttention-3, Megatron-LM's current defaults after it or without a date); plus the
    CUDA graph scopes and MoE dispatcher of the row's recipe (`moe_recipes`,
    `gpt_oss_recipes`), for a
    ``plan`` with TP overlap, the recipe's userbuffers methods (`userbuffers_fields`; TE
    1.x's defaults on `TE1_DEFAULT_UB_STACKS`, `PRE_TE2_USERBUFFERS`), its
    allocator's expandable segments (`row_recipes.expandable_segments`), FP8 weights
    (`precision_recipes.fp8_weight_fields`), gradient-reduction element size
    (`precision_recipes.grad_sync_fields`), Adam state dtypes
    (`precision_recipes.optimizer_precision_fields`) and norm backend
    (`norm_recipes.norm_backend_fields`). Whether FP8 GEMMs take only the TN layout is the
    device's (``fp8_tn_gemm_only`` None: `costmodel.execution_presets.device_options` resolves it
    from the row's profile, as for every `estimate_plan` caller)."""
    options = _era_options(raw)
    fields = moe_runtime_fields(raw) | gpt_oss_runtime_fields(raw)
    if plan is not None:
        fields = {**fields, **userbuffers_fields(raw, plan.tp_comm_overlap)}
        if plan.tp_comm_overlap and _te1_default_userbuffers(raw):
            fields = {**fields, **PRE_TE2_USERBUFFERS}
    if expandable_segments(raw):
        fields["expandable_segments"] = True
    fields.update(fp8_weight_fields(raw))
    fields.update(grad_sync_fields(raw))
    fields.update(optimizer_precision_fields(raw))
    fields.update(nemo_option_fields(raw, plan is not None and plan.tp_comm_overlap))
    fields.update(norm_backend_fields(raw))
    return dataclasses.replace(options, **fields) if fields else options


def _te1_default_userbuffers(raw: dict[str, str]) -> bool:
    return any(m in _text(raw, "source_version") for m in TE1_DEFAULT_UB_STACKS)


def row_era(raw: dict[str, str]) -> tuple[Era, RowDate | None]:
    """The row's era and the date it follows from: `ERA_BY_SOURCE` for the sources listed
    there (no date), else `row_era.era_for` of `row_era.row_date`."""
    source = _text(raw, "source_id")
    for prefix, era in ERA_BY_SOURCE:
        if source.startswith(prefix):
            return era, None
    date = row_date(raw)
    return era_for(date), date


def _era_options(raw: dict[str, str]) -> ExecutionOptions:
    if _text(raw, "source_id").startswith("MBRIDGE-"):
        return MEGATRON_BRIDGE_PERF
    if any(m in _text(raw, "source_version") for m in MEGATRON_2023_STACKS):
        return MEGATRON_2023
    return era_options(*row_era(raw))


def case_for_row(raw: dict[str, str]) -> RowCase:
    """The `estimate_plan` inputs of one CSV row; NotExpressible names what is missing."""
    reason = refusal(raw)
    if reason is not None:
        raise NotExpressible(reason)
    gpu_type = _text(raw, "gpu_type")
    profile = profile_for(gpu_type)
    precision = precision_for(_text(raw, "precision"))
    model = model_for(raw)
    plan = plan_for(raw, model)
    job = TrainingJob(
        seq_length=_int(raw, "seq_length"),
        global_batch_size=_int(raw, "global_batch_size"),
        precision=precision,
        optimizer=row_optimizer(raw),
    )
    return RowCase(
        model=model,
        cluster=ClusterSpec(hardware=profile, num_gpus=_int(raw, "num_gpus")),
        job=job,
        plan=plan,
        options=options_for_row(raw, plan),
        profile=profile,
        generation=gpu_generation(gpu_type),
    )


def noncausal_flops_per_iteration(model: ModelSpec, seq_length: int, batch: int) -> float:
    """Megatron-LM `num_floating_point_operations` before the causal factor (2024-07):
    the current count plus the masked half of the attention core, 3 x (forward) per token
    (published-runs-dev.md, "FLOPs conventions")."""
    causal_half = core_attention_forward_flops_per_token(model, seq_length)
    extra = 3 * causal_half * model.num_layers * seq_length * batch
    return model_flops_per_iteration(model, seq_length, batch) + extra


def flops_formula(convention: str) -> FlopsFormula | None:
    """The FLOPs-per-iteration function of a ``flops_convention`` text, or None when the
    source's convention is unknown (`FLOPS_CONVENTIONS`)."""
    lower = convention.lower()
    return next((f for marker, f in FLOPS_CONVENTIONS if marker in lower), None)


FLOPS_CONVENTIONS: tuple[tuple[str, FlopsFormula], ...] = (
    ("eq.3", sc21_flops_per_iteration),
    ("as of r0.8.0", noncausal_flops_per_iteration),
    ("nemo 24.03-era", noncausal_flops_per_iteration),
    ("palm", noncausal_flops_per_iteration),
    ("num_floating_point_operations of the commit used", model_flops_per_iteration),
)
"""``flops_convention`` marker -> FLOPs per iteration (published-runs-dev.md, "FLOPs
conventions"): SC21 Eq. 3 (recompute and full attention counted); Megatron-LM's count
before the causal factor (README 2024, NeMo 24.03; PaLM's 6N + 12·L·H·Q·T also counts the
full attention matrix); Megatron-LM's current causal count (code from 2025-03)."""


def published_iteration_time_s(raw: dict[str, str], case: RowCase) -> float:
    """Seconds per iteration of the published run, convention-free where the row allows:
    printed iteration time, else tokens/s/GPU, else TFLOP/s/GPU through the source's FLOPs
    formula (`flops_formula`). NotExpressible when none applies."""
    printed = _float(raw, "iteration_time_s")
    if printed:
        return printed
    gpus, seq, batch = case.cluster.num_gpus, case.job.seq_length, case.job.global_batch_size
    tokens = _float(raw, "tokens_per_sec_per_gpu") or _float(raw, "derived_tokens_per_sec_per_gpu")
    if tokens:
        return batch * seq / (tokens * gpus)
    tflops = _float(raw, "tflops_per_gpu")
    formula = flops_formula(_text(raw, "flops_convention"))
    if tflops and formula is not None:
        return formula(case.model, seq, batch) / (tflops * 1e12 * gpus)
    raise NotExpressible("no iteration time, tokens/s or known-convention TFLOP/s")
