"""Published throughput of one recipe on two GPU types (``published-runs-dev.csv``).

A source that runs the identical recipe (same release, model, precision, sequence length,
GPU count, parallel plan, micro and global batch, recompute and sharding) on two GPU types
measures the ratio of their training rates directly: nothing in the recipe differs but the
GPU and its system. `same_recipe_ratios` pairs such rows and summarises the published
tokens/s per GPU ratio for each pair of GPU types (`GPU_PAIRS`). The bench prints it
(``same_recipe_ratios`` of `bench/validate_published.py`'s JSON) beside the cost model's
own ratio, which follows the profiles' peaks and the fitted factors of each generation
(`costmodel.fitted_rates.FP8_GEMM_RATE_FACTORS`).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable

RECIPE_COLUMNS: tuple[str, ...] = (
    "source_id",
    "model",
    "precision",
    "seq_length",
    "num_gpus",
    "tp",
    "pp",
    "vpp",
    "cp",
    "ep",
    "etp",
    "micro_batch_size",
    "global_batch_size",
    "recompute",
    "fsdp_or_zero",
    "sequence_parallel",
)
"""The columns that make two rows the same recipe (``published-runs-dev.md`` explains
them); ``gpu_type`` is what differs."""

GPU_PAIRS: tuple[tuple[str, str], ...] = (
    ("GB300", "GB200"),
    ("B300", "B200"),
    ("GB300", "B300"),
    ("GB200", "B200"),
)
"""(numerator, denominator) GPU types compared: Blackwell Ultra against Blackwell in the
NVL72 rack and in the 8-GPU server, and each chip's rack against its server."""

RATE_COLUMN = "tokens_per_sec_per_gpu"
"""The published rate compared: tokens per second per GPU as the source printed it."""


def gpu_kind(gpu_type: str) -> str:
    """The GPU type without its system note: ``GB300 (NVL72)`` -> ``GB300``."""
    return gpu_type.split(" ")[0]


def recipe_rates(
    rows: Iterable[dict[str, str]],
) -> dict[tuple[str, ...], dict[str, list[tuple[str, float]]]]:
    """Recipe (`RECIPE_COLUMNS` values) -> GPU type (`gpu_kind`) -> (row id, published
    tokens/s per GPU) of every row that prints one as a plain number."""
    recipes: dict[tuple[str, ...], dict[str, list[tuple[str, float]]]] = {}
    for row in rows:
        text = (row.get(RATE_COLUMN) or "").strip()
        if not re.fullmatch(r"\d+(\.\d+)?", text):
            continue
        key = tuple(row.get(column, "") for column in RECIPE_COLUMNS)
        by_gpu = recipes.setdefault(key, {})
        by_gpu.setdefault(gpu_kind(row["gpu_type"]), []).append((row["row_id"], float(text)))
    return recipes


def same_recipe_ratios(rows: Iterable[dict[str, str]]) -> dict[str, dict[str, object]]:
    """For each pair of `GPU_PAIRS` found on one recipe: ``"A/B"`` -> the number of
    recipes run on both (``pairs``), the median, smallest and largest published tokens/s
    per GPU ratio A / B, and each pair's row ids and ratio (``rows``: [A rows, B rows,
    ratio]). Rows repeating one recipe on one GPU type are averaged (repeat measurements).
    Pairs of GPU types with no shared recipe are left out."""
    recipes = recipe_rates(rows)
    result: dict[str, dict[str, object]] = {}
    for numerator, denominator in GPU_PAIRS:
        pairs = []
        for by_gpu in recipes.values():
            if numerator in by_gpu and denominator in by_gpu:
                top, bottom = by_gpu[numerator], by_gpu[denominator]
                ratio = statistics.fmean(r for _, r in top) / statistics.fmean(r for _, r in bottom)
                pairs.append(([i for i, _ in top], [i for i, _ in bottom], ratio))
        if not pairs:
            continue
        ratios = [ratio for _, _, ratio in pairs]
        result[f"{numerator}/{denominator}"] = {
            "pairs": len(pairs),
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "rows": [list(p) for p in pairs],
        }
    return result


def with_predictions(
    ratios: dict[str, dict[str, object]], predicted_s: dict[str, float]
) -> dict[str, dict[str, object]]:
    """``ratios`` (`same_recipe_ratios`) with the cost model's own ratio beside each: per
    pair of GPU types the median predicted tokens/s per GPU ratio (``predicted_median``)
    over the recipe pairs whose rows were all priced (``predicted_pairs``), from the
    predicted seconds per iteration by row id (an identical recipe processes the same
    tokens on the same GPU count, so the rate ratio is the inverse time ratio)."""
    result: dict[str, dict[str, object]] = {}
    for name, entry in ratios.items():
        predicted = [
            statistics.fmean(predicted_s[i] for i in bottom)
            / statistics.fmean(predicted_s[i] for i in top)
            for top, bottom, _ in entry["rows"]  # type: ignore[union-attr]
            if all(i in predicted_s for i in (*top, *bottom))
        ]
        result[name] = entry | {
            "predicted_pairs": len(predicted),
            "predicted_median": statistics.median(predicted) if predicted else None,
        }
    return result
