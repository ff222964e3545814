"""Error statistics of the published-runs validation (`bench/validate_published.py`).

Pure functions over `Outcome` records (one per expressible published run):
- `summary`: median |error|, signed median, p90 |error|, fit fraction, row count;
- `kendall_tau`: rank agreement of predicted and published throughput inside strategy
  groups (`strategy_key`: one source release, model, cluster, sequence length and printed
  precision, two or more different strategies), pooled over the groups' pairs (Kendall
  1938, tau-a per group, concordant minus discordant over pairs).

The fitted parameters (FP8 and sustained 16-bit GEMM rate factors, MoE host-launch time) and
their leave-one-source-out errors are `bench/validation_fit.py`.

Errors are relative: (predicted - published) / published seconds per iteration.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

FP4_SUFFIX = "/nvfp4"
"""Suffix of an NVFP4 row's `Outcome.fit_key`: the GPU generation of its fp4 GEMM rate
factor (``blackwell/nvfp4``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """One published run beside its prediction."""

    row_id: str
    source_id: str
    model: str
    plan: str
    generation: str
    """A100, H100/H800 or Blackwell: the reporting group (issue 33's summaries)."""
    precision: str
    """Job precision as priced (bf16 or fp8)."""
    kind: str
    """dense or moe."""
    gpu_type: str
    num_gpus: int
    seq_length: int
    published_s: float
    """Published seconds per iteration."""
    predicted_s: float
    """Predicted seconds per iteration."""
    peak_memory_gib: float
    device_memory_gib: float
    fits: bool
    global_batch_size: int | None = None
    """Sequences per iteration of the published run; None: not known (a group's strategies
    are then compared by seconds per iteration, as if they processed the same tokens)."""
    precision_text: str = ""
    """The row's precision as the source printed it (``FP8``, ``MXFP8``, ...): FP8 recipes
    that `precision` prices alike are different software. Empty: `precision`."""
    not_fit_reason: str = ""
    """Why a row predicted not to fit may not have run as printed (its printed
    configuration differs from its release's recipe); empty when none is known."""
    sustained_fixed: bool = False
    """The row's execution options fix the sustained 16-bit GEMM rate factor (the 2021
    option set, `costmodel.execution_presets.MEGATRON_2021`): the fit neither uses the row for it
    nor moves the row with it."""
    fit_generation: str = ""
    """The profile's `profiles.schema_device.DeviceSpec.generation` (``ampere``, ``hopper``,
    ``blackwell``, ``blackwell_ultra``, ...), the key of the per-generation fitted factors
    (`fit_key`); empty: `generation`."""
    assumption: str = ""
    """A setting the row does not state, chosen by a stated rule, and why
    (`published_rows.RowCase.assumption`); empty when the row states what is priced."""
    apart_reason: str = ""
    """Why the row is priced but reported apart, in no summary, Kendall group or figure
    (`zero3_recipes.priced_apart_reason`); empty for a row of the figures."""
    task: str = "pretrain"
    """What the run trains (`norm_recipes.train_task`): ``pretrain``, ``sft`` (every weight)
    or ``lora`` (adapters on a frozen model)."""

    @property
    def fit_key(self) -> str:
        """The generation whose fitted factors the row fits and takes: `fit_generation`,
        else `generation`; an NVFP4 row's with `FP4_SUFFIX` (its GEMMs run on the fp4
        curve, whose rate factor is fitted apart from the fp8 one)."""
        generation = self.fit_generation or self.generation
        return generation + FP4_SUFFIX if self.precision == "nvfp4" else generation

    @property
    def error(self) -> float:
        """(predicted - published) / published seconds per iteration."""
        return (self.predicted_s - self.published_s) / self.published_s

    @property
    def source_family(self) -> str:
        """The source without release or table suffix (``MBRIDGE-26.04`` -> ``MBRIDGE``):
        releases of one recipe book share their recipes, so they are left out together."""
        return self.source_id.split("-")[0]


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of ``values`` by linear interpolation between order statistics
    (Hyndman-Fan type 7, numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def error_figures(errors: list[float]) -> dict[str, float]:
    """Median |error|, signed median error and p90 |error| (`quantile`) of relative
    ``errors``: the statistics of `summary`, for errors that come without their
    `Outcome` (a row of the bench's JSON, `bench/accuracy_table.py`)."""
    if not errors:
        raise ValueError("error figures of no errors")
    absolute = [abs(e) for e in errors]
    return {
        "median_abs_error": statistics.median(absolute),
        "signed_median_error": statistics.median(errors),
        "p90_abs_error": quantile(absolute, 0.9),
    }


def summary(outcomes: list[Outcome]) -> dict[str, float | int]:
    """Median |error|, signed median error, p90 |error| (`error_figures`), fit fraction and
    row count."""
    if not outcomes:
        return {"num_rows": 0}
    return {
        "num_rows": len(outcomes),
        **error_figures([o.error for o in outcomes]),
        "fit_fraction": sum(o.fits for o in outcomes) / len(outcomes),
    }


def grouped(outcomes: Iterable[Outcome], key: Callable[[Outcome], str]) -> dict[str, list[Outcome]]:
    """Outcomes by ``key``, keys sorted."""
    groups: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        groups.setdefault(key(outcome), []).append(outcome)
    return dict(sorted(groups.items()))


def strategy_key(outcome: Outcome) -> str:
    """The strategy group of ``outcome``: several strategies for the same model on the same
    kind of cluster (issue 33, Build 6), run by the same software. One source release (the
    ``source_id``: a Megatron-Bridge release is its own source), model, GPU type, sequence
    length and printed precision (an FP8 recipe, per-tensor current scaling or MXFP8, is
    software too). The number of GPUs is part of the strategy, not of the group: the issue's
    own groups (MegaScale's Table 2, SC21's Table 2) compare the same model at several
    data-parallel sizes by throughput per GPU. A fine-tuning row (`Outcome.task` ``sft`` or
    ``lora``) adds its task: a LoRA run and a full fine-tuning of the same model train
    different parameters. Rows that differ in any of the key's fields differ by more than
    their plan, and their published order is not the plan's to explain."""
    precision = outcome.precision_text or outcome.precision
    task = "" if outcome.task == "pretrain" else f" | {outcome.task}"
    return (
        f"{outcome.source_id} | {outcome.model} | {outcome.gpu_type} | "
        f"seq {outcome.seq_length} | {precision}{task}"
    )


def strategy_of(outcome: Outcome) -> str:
    """What a team chose inside a strategy group: the number of GPUs, the plan and the
    global batch."""
    return f"{outcome.num_gpus} GPUs | {outcome.plan} | gbs {outcome.global_batch_size}"


def tokens_per_s_per_gpu(outcome: Outcome) -> tuple[float, float]:
    """(published, predicted) tokens per second per GPU: global batch x sequence / (seconds
    per iteration x GPUs); without a known global batch, one sequence per iteration."""
    tokens = (outcome.global_batch_size or 1) * outcome.seq_length
    gpus = outcome.num_gpus
    return tokens / (outcome.published_s * gpus), tokens / (outcome.predicted_s * gpus)


def strategy_rates(outcomes: list[Outcome]) -> dict[str, tuple[float, float]]:
    """Strategy (`strategy_of`) -> (published, predicted) tokens/s per GPU of one group's
    ``outcomes``. Rows with an identical strategy are one strategy: their rates are
    averaged (the prediction is the same; the published figures are repeat measurements)."""
    rates: dict[str, list[tuple[float, float]]] = {}
    for outcome in outcomes:
        rates.setdefault(strategy_of(outcome), []).append(tokens_per_s_per_gpu(outcome))
    return {
        name: (statistics.fmean(p for p, _ in pairs), statistics.fmean(q for _, q in pairs))
        for name, pairs in sorted(rates.items())
    }


def concordance(rates: list[tuple[float, float]]) -> tuple[int, int, int]:
    """(concordant, discordant, pairs) of (published, predicted) rates; pairs tied in
    either order count in neither."""
    concordant = discordant = pairs = 0
    for i, (pub_i, pred_i) in enumerate(rates):
        for pub_j, pred_j in rates[i + 1 :]:
            pairs += 1
            sign = (pub_i - pub_j) * (pred_i - pred_j)
            concordant += sign > 0
            discordant += sign < 0
    return concordant, discordant, pairs


def kendall_tau(outcomes: list[Outcome]) -> dict[str, object]:
    """Pooled Kendall tau over the strategy groups (`strategy_key`) with two or more
    different strategies (`strategy_rates`), and per group; NaN when no group has two.
    ``strategies`` gives each such group's (published, predicted) tokens/s per GPU by
    strategy."""
    per_group: dict[str, float] = {}
    strategies: dict[str, dict[str, tuple[float, float]]] = {}
    total_c = total_d = total_pairs = 0
    for name, members in grouped(outcomes, strategy_key).items():
        rates = strategy_rates(members)
        if len(rates) < 2:
            continue
        c, d, pairs = concordance(list(rates.values()))
        per_group[name] = (c - d) / pairs
        strategies[name] = rates
        total_c, total_d, total_pairs = total_c + c, total_d + d, total_pairs + pairs
    tau = (total_c - total_d) / total_pairs if total_pairs else float("nan")
    return {"kendall_tau": tau, "pairs": total_pairs, "groups": per_group, "strategies": strategies}
