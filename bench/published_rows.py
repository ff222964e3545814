"""One place that turns a row of ``published-runs-dev.csv`` into what `estimate_plan` takes.

A row states a model shape, a cluster, a plan, a precision, an optimizer sharding and a
recompute setting; `case_for_row` maps exactly those onto `ModelSpec`
(`bench/row_model.py`), `ClusterSpec`, `TrainingJob`, `ParallelPlan` and the framework's
`ExecutionOptions` (`bench/row_options.py`), and raises `NotExpressible` with the reason
when a field has no counterpart (NVFP4 on a GPU without FP4 tensor cores, hybrid Mamba
layers without a preset, a virtual pipeline degree nobody published (such rows are priced
apart at every admitted degree, `bench/unstated_vpp.py`), ...). Plan settings a row states
only in its ``notes`` (an uneven first/last stage, all-gather context parallelism) are read
from them (`stated_note_fields`). What a row leaves to its recipe (uneven pipeline splits,
TP overlap, expert TP, MTP layers, GPT-OSS attention, Megatron-FSDP sharding) and what no
plan expresses (figures the source flags as a regression) comes from the recipe files cited
in `bench/row_recipes.py`; a DeepSpeed ZeRO-3 row's sharding, engine and unstated recompute
from `bench/zero3_recipes.py`; a LoRA row's adapters from
`bench/lora_recipes.py`; a hybrid row's recompute and TP overlap from
`bench/hybrid_recipes.py`. Nothing here filters rows by name. The published figure as
seconds per iteration is `bench/row_figures.py`.

Defaults for what a row leaves empty, each the framework's own default (column guide:
``published-runs-dev.md``; the model's in `bench/row_model.py`):
- micro-batch size 1 (Megatron-LM ``--micro-batch-size`` default);
- no recompute beyond what the row states; sequence parallelism with tp > 1 unless the
  row says it was not used (Megatron-Bridge and NeMo recipes set it with TP; SC21 predates
  it and says so); Megatron-Bridge and
  NeMo rows run the distributed optimizer (their performance recipes set
  ``use_distributed_optimizer``), other rows only when ``fsdp_or_zero`` says so;
  Megatron-Bridge's Kimi-K2 rows run layer-wise distributed Muon instead
  (`bench/optimizer_recipes.py`), every other row Adam;
- precision bf16 when the row does not state one; fp16 rows are priced as bf16 (same
  dense peak); FP8 in any scaling recipe (delayed, current, blockwise, MXFP8) as fp8; NVFP4
  as nvfp4 (Transformer Engine's NVFP4 block scaling).

`case_for_row` reads the row in its accepted spellings (`bench/row_spellings.py`, the one
place that rewrites another transcriber's spelling of a column, e.g. ``GB200 NVL72``,
``bfloat16``, ``1,024``, to the development set's). A column that states nothing ("n/a",
"not stated", "unknown", a lone dash) reads as an empty cell. A
column whose text says something the readers do not understand (a precision without a
GEMM curve, a recompute or sharding setting that is neither of the above, a task other
than pre-training, SFT or LoRA, a figure that is not a positive number) makes the row
`NotExpressible` with the column and its text: a row is never priced as something else.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from gpt_oss_recipes import gpt_oss_saver_fields
from hybrid_recipes import hybrid_plan_fields
from lora_recipes import row_lora
from nemo_recipes import nemo_plan_fields
from optimizer_recipes import optimizer_plan_fields, row_optimizer
from overlap_recipes import grad_reduce_overlapped, param_gather_overlapped, tp_overlap
from pipeline_recipes import pipeline_fields
from recipe_keys import NotExpressible
from row_columns import column_int, column_text
from row_era import era_plan_fields
from row_model import model_for
from row_options import MEGATRON_2023_STACKS, options_for_row, row_era
from row_recipes import expert_tp, refusal, sharding_fields
from row_spellings import (
    AFFIRMATIVE_WORDS,
    NEGATIVE_WORDS,
    gpu_text,
    normalised_row,
    starts_with_word,
    unstated,
)
from saver_recipes import saver_fields
from zero3_recipes import is_zero3, zero3_plan_fields, zero3_recompute

from costmodel.execution import ExecutionOptions
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

PROFILE_BY_GPU = (
    ("A100", "a100-sxm-80gb"),
    ("A800", "a800-sxm-80gb"),
    ("H800", "h800-sxm-80gb"),
    ("H200", "h200-sxm-141gb"),
    ("H100", "h100-sxm-80gb"),
    ("GB200", "gb200-nvl72"),
    ("GB300", "gb300-nvl72"),
    ("B300", "b300"),
    ("B200", "b200"),
)
"""``gpu_type`` prefix (upper case) -> stored profile, first match wins. An A100 that
prints 40 GB takes the 40 GB profile (`A100_40GB`); A100 rows that do not print the memory
size (MegaScale) use the 80 GB profile."""

A100_40GB = re.compile(r"(?<!\d)40\s*GB")
"""An A100 ``gpu_type`` naming the 40 GB part (``A100-SXM4-40GB``, ``A100 40GB``)."""

WITHOUT_PROFILE = re.compile(r"PCIE|\bNVL\b")
"""``gpu_type`` text of form factors no stored profile describes: PCIe cards and the H100
NVL (lower power and clocks than the SXM parts, NVLink bridges in place of NVSwitch); such
a row is refused rather than priced on the SXM profile (NVL72 systems do not match)."""

GENERATION_BY_GPU = (
    ("A100", "A100"),
    ("A800", "A100"),
    ("H100", "H100/H800"),
    ("H800", "H100/H800"),
    ("H200", "H100/H800"),
)
"""``gpu_type`` prefix -> GPU generation of the summaries (H200, a Hopper part, reports
with H100/H800; the A800, an A100 with fewer NVLink links, with A100); anything else is
Blackwell."""

DISTRIBUTED_OPTIMIZER_SOURCES = ("MBRIDGE-", "NEMO-", "MOEZOO-", "NEMOTRON4-")
"""Sources whose recipes run the distributed optimizer when ``fsdp_or_zero`` is empty."""


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
    assumption: str = ""
    """A setting the row does not state that the case chooses by a stated rule, and why
    (`zero3_recipes.Zero3Recompute.reason`); empty when the row states everything priced."""


def chip_name(gpu_type: str) -> str:
    """The ``gpu_type`` column in upper case, opening with the chip it names
    (`row_spellings.gpu_text`: ``NVIDIA H100 80GB HBM3`` -> ``H100 (NVIDIA H100 80GB HBM3)``)."""
    return gpu_text(gpu_type.strip()).upper()


def gpu_generation(gpu_type: str) -> str:
    """A100, H100/H800 or Blackwell, from the ``gpu_type`` column."""
    upper = chip_name(gpu_type)
    return next((g for prefix, g in GENERATION_BY_GPU if upper.startswith(prefix)), "Blackwell")


def profile_for(gpu_type: str) -> str:
    """The stored profile of a ``gpu_type``; NotExpressible when none is stored
    (`PROFILE_BY_GPU`, `WITHOUT_PROFILE`)."""
    upper = chip_name(gpu_type)
    if WITHOUT_PROFILE.search(upper):
        raise NotExpressible(
            f"gpu_type {gpu_type!r}: no stored profile for PCIe and NVL cards, which run "
            "below the SXM profiles' power and clocks, without NVSwitch; an SXM part is priced"
        )
    if upper.startswith("A100") and A100_40GB.search(upper):
        return "a100-sxm-40gb"
    for prefix, name in PROFILE_BY_GPU:
        if upper.startswith(prefix):
            return name
    chips = ", ".join(prefix for prefix, _ in PROFILE_BY_GPU)
    raise NotExpressible(
        f"gpu_type {gpu_type!r} names no chip with a stored profile: name one of {chips}"
    )


SIXTEEN_BIT_WORDS = ("BF16", "FP16", "MIXED", "HALF")
"""Words of a ``precision`` column that name 16-bit mixed precision (priced as bf16)."""


def precision_for(text: str) -> str:
    """The job precision of a ``precision`` column (see the module docstring);
    NotExpressible for a precision the cost model has no GEMM curve for (FP4 formats other
    than NVFP4, TF32, FP32, INT8, ...), named with the text."""
    upper = text.upper()
    if "NVFP4" in upper:
        return "nvfp4"
    if "FP4" in upper:
        raise NotExpressible(f"precision {text!r}: of the 4-bit formats only NVFP4 is priced")
    if "FP8" in upper or "QUANTIZATION GRANULARITY" in upper:
        return "fp8"
    if any(w in upper for w in SIXTEEN_BIT_WORDS) or unstated(text):
        return "bf16"
    raise NotExpressible(
        f"precision {text!r}: priced are bf16/fp16 mixed precision, FP8 (any scaling) and NVFP4"
    )


ZERO_1 = re.compile(r"zero[- ]?(stage[- ]?)?1\b")
"""ZeRO stage 1 (optimizer state sharded, as Megatron's distributed optimizer)."""

ZERO_2 = re.compile(r"zero[- ]?(stage[- ]?)?2\b")
"""ZeRO stage 2: DeepSpeed also shards the gradients, which the distributed optimizer
keeps whole, under its own engine's schedule."""


def _distributed_optimizer(raw: dict[str, str]) -> bool:
    """Whether the row shards the optimizer state as Megatron's distributed optimizer does:
    the distributed optimizer itself, ZeRO-1, or FSDP that keeps parameters after forward
    (Megatron-FSDP rows take their sharding from `sharding_fields`, DeepSpeed ZeRO-3 rows
    from `zero3_recipes.zero3_plan_fields`). Empty: the source's
    recipe default (`DISTRIBUTED_OPTIMIZER_SOURCES`); NotExpressible for a sharding without
    a counterpart (fairscale, ZeRO-2) or a text not understood."""
    text = column_text(raw, "fsdp_or_zero")
    lower = text.lower()
    if is_zero3(raw):
        return False
    if unstated(text):
        return column_text(raw, "source_id").startswith(DISTRIBUTED_OPTIMIZER_SOURCES)
    if "fairscale" in lower or ZERO_2.search(lower):
        raise NotExpressible(
            f"fsdp_or_zero {text!r}: no counterpart (ZeRO-2 shards the gradients, "
            "which Megatron's distributed optimizer keeps whole; fairscale's sharded DDP)"
        )
    if starts_with_word(lower, NEGATIVE_WORDS):
        return False
    if any(k in lower for k in ("distributed optimizer", "fsdp")) or ZERO_1.search(lower):
        return True
    if starts_with_word(lower, ("plain", "ddp")):
        return False
    raise NotExpressible(
        f"fsdp_or_zero {text!r} not understood: state 'none', 'distributed optimizer', "
        "'ZeRO-1', 'FSDP' or 'Megatron-FSDP'"
    )


def _recompute(raw: dict[str, str]) -> str:
    """``full``, ``selective`` or ``none`` from the ``recompute`` column: "full ..." and
    activation checkpointing (whole layers) are full; empty or "not stated" is none (the
    framework default); NotExpressible for a text that does not say which."""
    text = column_text(raw, "recompute").lower()
    if text.startswith("full"):
        return "full"
    if text.startswith("selective"):
        return "selective"
    if unstated(text) or starts_with_word(text, NEGATIVE_WORDS):
        return "none"
    if "checkpoint" in text:
        return "full"
    if starts_with_word(text, AFFIRMATIVE_WORDS):
        raise NotExpressible(
            f"recompute {text!r} does not say which: Megatron-LM's --recompute-activations is "
            "selective, --checkpoint-activations full; state 'full', 'selective' or 'none'"
        )
    raise NotExpressible(f"recompute {text!r} not understood: state 'full', 'selective' or 'none'")


def _sequence_parallel(raw: dict[str, str], tp: int) -> bool:
    """Sequence parallelism: on with tp > 1 unless the ``sequence_parallel`` column says it
    was not used; NotExpressible for a text that says neither."""
    text = column_text(raw, "sequence_parallel").lower()
    if starts_with_word(text, NEGATIVE_WORDS):
        return False
    if not unstated(text) and not starts_with_word(text, AFFIRMATIVE_WORDS):
        raise NotExpressible(f"sequence_parallel {text!r} not understood: state 'yes' or 'no'")
    return tp > 1


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
    vpp = column_text(raw, "vpp")
    interleaved_note = "interleaved schedule" in column_text(raw, "notes").lower()
    return "interleaved" not in vpp and not (interleaved_note and not vpp)


def stated_note_fields(raw: dict[str, str], pp: int, cp: int) -> dict[str, object]:
    """Plan fields the row's ``notes`` state (`ONE_FEWER_LAYER_NOTE`,
    `ALL_GATHER_CP_NOTE`); empty for rows without those statements."""
    notes = column_text(raw, "notes").lower()
    fields: dict[str, object] = {}
    if ONE_FEWER_LAYER_NOTE in notes and pp > 1:
        fields["account_for_embedding_in_pipeline_split"] = True
        fields["account_for_loss_in_pipeline_split"] = True
    if ALL_GATHER_CP_NOTE in notes and cp > 1:
        fields["cp_comm_type"] = "all_gather"
    return fields


def _check_printed_dp(raw: dict[str, str], gpus: int, model_parallel: int) -> None:
    """NotExpressible when the row prints a data-parallel degree other than
    ``num_gpus / (tp·pp·cp)`` (the plan's), unless its ``notes`` name the derived one as
    the intended value ("treat DP=8 ...", Llama 3's row of 16,384 GPUs printed with DP 4)."""
    text = column_text(raw, "dp")
    if text in ("", "n/a") or gpus % model_parallel:
        return
    derived = gpus // model_parallel
    printed = column_int(raw, "dp")
    notes = column_text(raw, "notes").lower().replace(" ", "")
    if printed != derived and f"treatdp={derived}" not in notes:
        raise NotExpressible(
            f"dp {printed} printed, but num_gpus {gpus} / (tp·pp·cp {model_parallel}) = "
            f"{derived}: one of the two is wrong as published"
        )


def plan_for(raw: dict[str, str], model: ModelSpec) -> ParallelPlan:
    """The row's `ParallelPlan` (tp pp vpp cp ep dp, mbs, recompute, optimizer sharding)."""
    if not vpp_stated(raw):
        raise NotExpressible(VPP_NOT_STATED)
    tp, pp = column_int(raw, "tp", 1), column_int(raw, "pp", 1)
    vpp, cp = column_int(raw, "vpp", 1), column_int(raw, "cp", 1)
    ep = column_int(raw, "ep", 1) if model.num_experts else 1
    gpus = column_int(raw, "num_gpus")
    _check_printed_dp(raw, gpus, tp * pp * cp)
    sp = _sequence_parallel(raw, tp)
    fields: dict[str, object] = {
        "tp": tp,
        "pp": pp,
        "vpp": vpp,
        "cp": cp,
        "ep": ep,
        "micro_batch_size": column_int(raw, "micro_batch_size", 1),
        "recompute": _recompute(raw),
        "distributed_optimizer": _distributed_optimizer(raw),
        "sequence_parallel": sp,
        "etp": expert_tp(raw, model) if ep > 1 else None,
        "tp_comm_overlap": tp_overlap(raw, tp, sp),
        **pipeline_fields(raw, model, pp, vpp),
        **(sharding_fields(raw) or zero3_plan_fields(raw) or {}),
        **optimizer_plan_fields(raw),
        **stated_note_fields(raw, pp, cp),
    }
    fields.update(saver_fields(raw, pp, bool(fields.get("use_megatron_fsdp"))))
    fields.update(gpt_oss_saver_fields(raw))
    fields.update(nemo_plan_fields(raw, model, fields))
    if any(m in column_text(raw, "source_version") for m in MEGATRON_2023_STACKS):
        fields["overlap_grad_reduce"] = False
    else:
        era, date = row_era(raw)
        fields.update(era_plan_fields(era, date, pp, bool(fields["distributed_optimizer"])))
        if not grad_reduce_overlapped(raw):
            fields["overlap_grad_reduce"] = False
            fields["overlap_param_gather"] = False
        if not param_gather_overlapped(raw):
            fields["overlap_param_gather"] = False
    fields.update(hybrid_plan_fields(raw, tp, sp))
    return ParallelPlan.for_world(gpus, **fields)


def case_for_row(raw: dict[str, str]) -> RowCase:
    """The `estimate_plan` inputs of one CSV row; NotExpressible names what is missing."""
    raw = normalised_row(raw)
    reason = refusal(raw)
    if reason is not None:
        raise NotExpressible(reason)
    gpu_type = column_text(raw, "gpu_type")
    profile = profile_for(gpu_type)
    precision = precision_for(column_text(raw, "precision"))
    if precision == "nvfp4" and "fp4" not in load_profile(profile).device.peak_tflops:
        raise NotExpressible(f"NVFP4 precision on {profile}: no FP4 tensor cores")
    model = model_for(raw)
    plan = plan_for(raw, model)
    job = TrainingJob(
        seq_length=column_int(raw, "seq_length"),
        global_batch_size=column_int(raw, "global_batch_size"),
        precision=precision,
        optimizer=row_optimizer(raw),
        lora=row_lora(raw),
    )
    options = options_for_row(raw, plan)
    assumption = ""
    if is_zero3(raw) and unstated(column_text(raw, "recompute")):
        chosen = zero3_recompute(model, job, plan, options, load_profile(profile))
        plan = dataclasses.replace(plan, recompute=chosen.recompute)
        assumption = chosen.reason
    return RowCase(
        model=model,
        cluster=ClusterSpec(hardware=profile, num_gpus=column_int(raw, "num_gpus")),
        job=job,
        plan=plan,
        options=options,
        profile=profile,
        generation=gpu_generation(gpu_type),
        assumption=assumption,
    )
