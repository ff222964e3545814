"""The rows the bench prices but reports apart from every figure of
`bench/validate_published.py`: the DeepSpeed ZeRO-3 rows of SC21 Table 2
(`zero3_recipes.priced_apart_reason`).

`split_apart` takes them out of the outcomes before any summary, Kendall group, fit or
figure. `zero3_apart_report` is the JSON's ``priced_apart``: each row's published and
predicted seconds, error, peak memory, assumption and reason, the engine costs the model
does not price (`zero3_recipes.UNPRICED_ENGINE_COSTS`), and the Kendall tau of the pairs
these rows would add to their strategy groups (`cross_pairs_tau`) beside the pooled tau
with and without them. `zero3_apart_lines` is the validation page's section,
`print_zero3_apart` the text output's lines.
"""

from __future__ import annotations

import math

from validation_stats import (
    Outcome,
    concordance,
    grouped,
    kendall_tau,
    strategy_key,
    strategy_of,
    strategy_rates,
)
from zero3_recipes import APART_TITLE, ENGINE_SOURCE, UNPRICED_ENGINE_COSTS


def split_apart(outcomes: list[Outcome]) -> tuple[list[Outcome], list[Outcome]]:
    """(rows of the figures, rows priced apart: those with an `Outcome.apart_reason`), each
    in the order of ``outcomes``."""
    return (
        [o for o in outcomes if not o.apart_reason],
        [o for o in outcomes if o.apart_reason],
    )


def _strategies(members: list[Outcome]) -> list[tuple[int, tuple[float, float]]]:
    """(GPUs, (published, predicted) tokens/s per GPU) of each strategy of ``members``
    (`validation_stats.strategy_rates`)."""
    gpus = {strategy_of(o): o.num_gpus for o in members}
    return [(gpus[name], rates) for name, rates in strategy_rates(members).items()]


def cross_pairs_tau(
    figures: list[Outcome], apart: list[Outcome], *, same_gpus: bool = False
) -> dict[str, float | int]:
    """Kendall tau, (concordant - discordant) / pairs, over the pairs of one strategy of
    ``apart`` and one of ``figures`` in the same strategy group
    (`validation_stats.strategy_key`); ``same_gpus``: only pairs at the same number of GPUs
    (SC21 Table 2 sets the two side by side at equal GPU counts). NaN without a pair."""
    apart_ids = {o.row_id for o in apart}
    c = d = pairs = 0
    for members in grouped([*figures, *apart], strategy_key).values():
        ours = _strategies([o for o in members if o.row_id in apart_ids])
        theirs = _strategies([o for o in members if o.row_id not in apart_ids])
        for gpus_a, rate_a in ours:
            for gpus_b, rate_b in theirs:
                if same_gpus and gpus_a != gpus_b:
                    continue
                ci, di, pi = concordance([rate_a, rate_b])
                c, d, pairs = c + ci, d + di, pairs + pi
    return {"tau": (c - d) / pairs if pairs else float("nan"), "pairs": pairs}


def _pooled(outcomes: list[Outcome]) -> dict[str, float | int]:
    """The pooled Kendall tau of ``outcomes`` (`validation_stats.kendall_tau`) and its pairs."""
    tau = kendall_tau(outcomes)
    return {"tau": tau["kendall_tau"], "pairs": tau["pairs"]}  # type: ignore[dict-item]


def apart_row(o: Outcome) -> dict[str, object]:
    """One entry of ``priced_apart.rows``."""
    return {
        "row_id": o.row_id,
        "source_id": o.source_id,
        "model": o.model,
        "plan": o.plan,
        "published_s": o.published_s,
        "predicted_s": o.predicted_s,
        "error": o.error,
        "peak_memory_gib": o.peak_memory_gib,
        "device_memory_gib": o.device_memory_gib,
        "fits": o.fits,
        "assumption": o.assumption,
        "reason": o.apart_reason,
    }


def zero3_apart_report(figures: list[Outcome], apart: list[Outcome]) -> dict[str, object]:
    """The JSON's ``priced_apart`` for the rows of the figures ``figures`` and the rows
    priced apart ``apart`` (`split_apart`)."""
    return {
        "title": APART_TITLE,
        "rows": [apart_row(o) for o in apart],
        "engine_source": ENGINE_SOURCE,
        "unpriced_engine_costs": list(UNPRICED_ENGINE_COSTS),
        "kendall_tau": {
            "ptdp_vs_zero3": cross_pairs_tau(figures, apart),
            "ptdp_vs_zero3_same_gpus": cross_pairs_tau(figures, apart, same_gpus=True),
            "pooled_without": _pooled(figures),
            "pooled_if_included": _pooled([*figures, *apart]),
        },
    }


def _tau_text(entry: dict[str, float | int]) -> str:
    """``tau over N pairs``, ``n/a`` for a NaN tau."""
    tau = float(entry["tau"])
    return f"{'n/a' if math.isnan(tau) else f'{tau:+.2f}'} over {entry['pairs']} pairs"


def tau_sentence(report: dict) -> str:
    """The Kendall figures of ``report`` (``priced_apart`` of the JSON) as one sentence."""
    taus = report["kendall_tau"]
    return (
        "Kendall tau of the PTD-P vs ZeRO-3 pairs of one strategy group: "
        f"{_tau_text(taus['ptdp_vs_zero3'])} (at the same GPU count: "
        f"{_tau_text(taus['ptdp_vs_zero3_same_gpus'])}); pooled tau with these rows in the "
        f"groups: {_tau_text(taus['pooled_if_included'])}, without them (the figures): "
        f"{_tau_text(taus['pooled_without'])}."
    )


def zero3_apart_lines(report: dict) -> list[str]:
    """The validation page's section on ``report`` (``priced_apart`` of the JSON): a table
    of the rows, why they are apart, each row's assumption, the engine costs not priced and
    the Kendall figures; none without rows."""
    rows = report.get("rows", [])
    if not rows:
        return []
    lines = [
        "",
        f"## {report['title']}",
        "",
        "Priced at the shipped defaults and reported here only: in no summary, Kendall group, "
        "fit or figure above.",
        "",
        "| row | model | plan | published s | predicted s | error | peak GiB |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['row_id']} | {r['model']} | {r['plan']} | {r['published_s']:.2f} | "
        f"{r['predicted_s']:.2f} | {r['error']:+.1%} | {r['peak_memory_gib']:.1f} |"
        for r in rows
    ]
    reasons = dict.fromkeys(r["reason"] for r in rows)
    lines += ["", "Why apart: " + "; ".join(reasons) + "."]
    assumed = [r for r in rows if r["assumption"]]
    if assumed:
        lines += ["", "What each row assumes:", ""]
        lines += [f"- Row {r['row_id']}: {r['assumption']}." for r in assumed]
    lines += ["", f"Engine costs not priced ({report['engine_source']}):", ""]
    lines += [f"- {cost}." for cost in report["unpriced_engine_costs"]]
    return [*lines, "", tau_sentence(report)]


def print_zero3_apart(report: dict | None) -> None:
    """The text output's lines on ``report`` (``priced_apart`` of the JSON): one per row
    and the Kendall figures; nothing without rows."""
    if not report or not report["rows"]:
        return
    for r in report["rows"]:
        print(
            f"priced apart: row {r['row_id']} {r['model'][:22]} {r['plan']}: published "
            f"{r['published_s']:.2f} s, predicted {r['predicted_s']:.2f} s "
            f"({r['error']:+.1%}), {r['peak_memory_gib']:.1f} GiB"
        )
    print(f"priced apart: {tau_sentence(report)}")
