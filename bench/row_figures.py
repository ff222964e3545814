"""A published row's figure as seconds per iteration (`published_iteration_time_s`), and
a row's case priced as the validation prices it (`case_estimate`, `priced_row`).

The published figure is turned into seconds per iteration: the printed iteration time, else
global batch x sequence / (tokens/s/GPU x GPUs), else the printed TFLOP/s/GPU (or aggregate
PFLOP/s / GPUs) through the source's own FLOPs convention (`FLOPS_CONVENTIONS`;
published-runs-dev.md, "FLOPs conventions").
"""

from __future__ import annotations

from collections.abc import Callable

from published_rows import RowCase, case_for_row
from recipe_keys import NotExpressible
from row_columns import column_float, column_text
from row_spellings import normalised_row

from costmodel.estimate import Estimate, estimate_plan
from costmodel.execution import ExecutionOptions
from costmodel.flops import core_attention_forward_flops_per_token
from costmodel.iteration_flops import model_flops_per_iteration, sc21_flops_per_iteration
from profiles.schema import HardwareProfile
from profiles.store import load_profile
from specs.model import ModelSpec
from specs.plan import ParallelPlan

FlopsFormula = Callable[[ModelSpec, int, int], float]
"""FLOPs of one iteration from (model, sequence length, global batch)."""


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
    ("(v0.8: full non-causal", noncausal_flops_per_iteration),
    ("nemo 24.03-era", noncausal_flops_per_iteration),
    ("palm", noncausal_flops_per_iteration),
    ("num_floating_point_operations of the commit used", model_flops_per_iteration),
)
"""``flops_convention`` marker -> FLOPs per iteration (published-runs-dev.md, "FLOPs
conventions"): SC21 Eq. 3 (recompute and full attention counted); Megatron-LM's count
before the causal factor (README 2024 and the MoE README of v0.8, NeMo 24.03; PaLM's
6N + 12·L·H·Q·T also counts the full attention matrix); Megatron-LM's current causal count
(code from 2025-03)."""


def published_iteration_time_s(raw: dict[str, str], case: RowCase) -> float:
    """Seconds per iteration of the published run, convention-free where the row allows:
    printed iteration time, else tokens/s/GPU, else TFLOP/s/GPU (or the aggregate PFLOP/s
    over the row's GPUs) through the source's FLOPs formula (`flops_formula`).
    NotExpressible when none applies: an MFU alone is not read, since the peak it divides
    by is the source's choice (published-runs-dev.md, "FLOPs conventions")."""
    printed = column_float(raw, "iteration_time_s")
    if printed:
        return printed
    gpus, seq, batch = case.cluster.num_gpus, case.job.seq_length, case.job.global_batch_size
    tokens = column_float(raw, "tokens_per_sec_per_gpu") or column_float(
        raw, "derived_tokens_per_sec_per_gpu"
    )
    if tokens:
        return batch * seq / (tokens * gpus)
    tflops = column_float(raw, "tflops_per_gpu")
    aggregate_pflops = column_float(raw, "aggregate_pflops")
    if not tflops and aggregate_pflops:
        tflops = aggregate_pflops * 1e3 / gpus
    formula = flops_formula(column_text(raw, "flops_convention"))
    if tflops and formula is not None:
        return formula(case.model, seq, batch) / (tflops * 1e12 * gpus)
    raise NotExpressible("no iteration time, tokens/s or known-convention TFLOP/s")


def published_case(raw: dict[str, str]) -> tuple[RowCase, float]:
    """A dev-set row's case (`published_rows.case_for_row`) and its published seconds per
    iteration (`published_iteration_time_s`), the row read in its accepted spellings
    (`row_spellings.normalised_row`). NotExpressible or SpecError when the row cannot be
    priced."""
    raw = normalised_row(raw)
    case = case_for_row(raw)
    return case, published_iteration_time_s(raw, case)


def case_estimate(
    case: RowCase,
    *,
    model: ModelSpec | None = None,
    plan: ParallelPlan | None = None,
    options: ExecutionOptions | None = None,
    profile: HardwareProfile | None = None,
) -> Estimate:
    """`costmodel.estimate.estimate_plan` of ``case``: its model, cluster, job, plan and
    execution options on its stored profile, with ``model``, ``plan``, ``options`` or an
    already loaded ``profile`` in their place where given."""
    return estimate_plan(
        case.model if model is None else model,
        case.cluster,
        case.job,
        case.plan if plan is None else plan,
        load_profile(case.profile) if profile is None else profile,
        options=case.options if options is None else options,
    )


def row_estimate(raw: dict[str, str]) -> tuple[RowCase, Estimate]:
    """A row's case (`published_rows.case_for_row`) and its `case_estimate`, for a row
    with no published figure to read."""
    case = case_for_row(raw)
    return case, case_estimate(case)


def priced_row(raw: dict[str, str]) -> tuple[RowCase, Estimate, float]:
    """A dev-set row as the validation prices it: its case and published seconds per
    iteration (`published_case`), and the estimate of its plan with the row's execution
    options (`case_estimate`)."""
    case, published_s = published_case(raw)
    return case, case_estimate(case), published_s
