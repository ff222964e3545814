"""Error statistics of the published-runs validation (`bench/validate_published.py`).

Pure functions over `Outcome` records (one per expressible published run):
- `summary`: median |error|, signed median, p90 |error|, fit fraction, row count;
- `kendall_tau`: rank agreement of predicted and published throughput inside strategy
  groups (same model, GPU, sequence length: several published strategies), pooled over the
  groups' pairs (Kendall 1938, tau-a per group, concordant minus discordant over pairs);
- `fit_time_scales` / `apply_time_scales`: one multiplicative time scale per GPU
  generation, the geometric median of published / predicted time over the fitting rows;
- `leave_one_source_out`: for each source family, the scales fitted on every other
  family, applied to that family's rows; the errors of those rows are out of sample.

Errors are relative: (predicted - published) / published seconds per iteration.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """One published run beside its prediction."""

    row_id: str
    source_id: str
    model: str
    plan: str
    generation: str
    """A100, H100/H800 or Blackwell."""
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


def summary(outcomes: list[Outcome]) -> dict[str, float | int]:
    """Median |error|, signed median error, p90 |error|, fit fraction and row count."""
    if not outcomes:
        return {"num_rows": 0}
    errors = [o.error for o in outcomes]
    absolute = [abs(e) for e in errors]
    return {
        "num_rows": len(outcomes),
        "median_abs_error": statistics.median(absolute),
        "signed_median_error": statistics.median(errors),
        "p90_abs_error": quantile(absolute, 0.9),
        "fit_fraction": sum(o.fits for o in outcomes) / len(outcomes),
    }


def grouped(outcomes: Iterable[Outcome], key: Callable[[Outcome], str]) -> dict[str, list[Outcome]]:
    """Outcomes by ``key``, keys sorted."""
    groups: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        groups.setdefault(key(outcome), []).append(outcome)
    return dict(sorted(groups.items()))


def strategy_key(outcome: Outcome) -> str:
    """Same model, GPU type and sequence length: the strategies a team chose between."""
    return f"{outcome.model} | {outcome.gpu_type} | seq {outcome.seq_length}"


def concordance(outcomes: list[Outcome]) -> tuple[int, int, int]:
    """(concordant, discordant, pairs) of predicted vs published tokens/s per GPU; pairs
    tied in either order count in neither."""
    rates = [(1 / (o.published_s * o.num_gpus), 1 / (o.predicted_s * o.num_gpus)) for o in outcomes]
    concordant = discordant = pairs = 0
    for i, (pub_i, pred_i) in enumerate(rates):
        for pub_j, pred_j in rates[i + 1 :]:
            pairs += 1
            sign = (pub_i - pub_j) * (pred_i - pred_j)
            concordant += sign > 0
            discordant += sign < 0
    return concordant, discordant, pairs


def kendall_tau(outcomes: list[Outcome]) -> dict[str, object]:
    """Pooled Kendall tau over the strategy groups with two or more rows, and per group."""
    per_group: dict[str, float] = {}
    total_c = total_d = total_pairs = 0
    for name, members in grouped(outcomes, strategy_key).items():
        if len(members) < 2:
            continue
        c, d, pairs = concordance(members)
        per_group[name] = (c - d) / pairs
        total_c, total_d, total_pairs = total_c + c, total_d + d, total_pairs + pairs
    tau = (total_c - total_d) / total_pairs if total_pairs else float("nan")
    return {"kendall_tau": tau, "pairs": total_pairs, "groups": per_group}


def fit_time_scales(outcomes: list[Outcome]) -> dict[str, float]:
    """Per GPU generation: exp(median(log(published / predicted))) over ``outcomes``."""
    return {
        generation: math.exp(
            statistics.median(math.log(o.published_s / o.predicted_s) for o in rows)
        )
        for generation, rows in grouped(outcomes, lambda o: o.generation).items()
    }


def apply_time_scales(outcomes: list[Outcome], scales: dict[str, float]) -> list[Outcome]:
    """Outcomes with predicted time times their generation's scale (1 when none fitted)."""
    return [
        dataclasses.replace(o, predicted_s=o.predicted_s * scales.get(o.generation, 1.0))
        for o in outcomes
    ]


def leave_one_source_out(outcomes: list[Outcome]) -> tuple[list[Outcome], dict[str, dict]]:
    """Every outcome predicted with scales fitted on the other source families, and per
    family the scales used (generations without other rows keep scale 1)."""
    predicted: list[Outcome] = []
    scales_by_family: dict[str, dict] = {}
    for family, rows in grouped(outcomes, lambda o: o.source_family).items():
        others = [o for o in outcomes if o.source_family != family]
        scales = fit_time_scales(others)
        scales_by_family[family] = scales
        predicted.extend(apply_time_scales(rows, scales))
    return predicted, scales_by_family
