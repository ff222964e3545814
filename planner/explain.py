"""Explanations of a `SearchResult`, as plain text lines.

- What was pruned: candidates enumerated, rejected per rule (with one message and its fix)
  and by the memory limit.
- A search the time limit cut short: candidates screened of the valid ones and those not
  reached; the plans ranked are the best of those screened (`time_limit_note`).
- The winner: its iteration time, throughput, MFU, peak memory and per-phase breakdown.
- Why it beats the runner-up: the largest differences between their breakdowns, grouped as
  bubble, exposed communication (TP, CP, EP, PP, DP), recompute, compute and optimizer,
  plus their peak memory and the knobs that differ.
- When nothing fits: the closest candidates, how far over the limit they are, and which
  changes would make them fit (full recompute, distributed optimizer, sequence parallel,
  a smaller micro-batch, CPU activation offloading of half the layers or of the attention
  inputs, a wider tp, more pipeline stages on the same or on more GPUs), each with
  the peak memory `costmodel.memory` predicts for it (`planner.explain_fit`).
"""

from __future__ import annotations

from collections.abc import Callable

from costmodel.estimate import Estimate
from planner.explain_fit import (
    MODEL_STATE_BYTES_PER_PARAM,
    fit_suggestion_lines,
    min_gpus_for_model_state,
)
from planner.ranking import RANK_TOLERANCE
from planner.search_result import BOUND_REJECTION, MEMORY_REJECTION, RankedPlan, SearchResult
from planner.space import KNOBS
from specs.formats import ROUNDING_FRACTION, gib, mfu_text, shown_seconds
from specs.plan import ParallelPlan
from specs.rules import rule_ids

PHASE_GROUPS: dict[str, tuple[str, ...]] = {
    "bubble": ("bubble_s",),
    "exposed communication": (
        "tp_exposed_s",
        "cp_exposed_s",
        "ep_exposed_s",
        "pp_exposed_s",
        "dp_exposed_s",
    ),
    "recompute": ("compute_recompute_s",),
    "compute": ("compute_forward_s", "compute_backward_s"),
    "optimizer": ("optimizer_s",),
}
"""Breakdown fields (`costmodel.iteration.Breakdown`) summed into the compared
groups."""


def _count(n: int) -> str:
    return f"{n:,}"


def _most_rejections_first(rejected: dict[str, int]) -> list[tuple[str, int]]:
    """(rule id, count) pairs, the most rejections first; a tie in `specs.rules.RULES`'
    check order, so that a rule a pinned knob breaks (tp 3 against 256 GPUs:
    world_size_matches, heads_divisible_by_tp) comes before the one it causes (dp = 85 not
    dividing the batch: global_batch_divisible_by_mbs_dp), and its fix is the one named;
    the search's own reasons (memory, the time bound) after the rules."""
    order = {rule_id: i for i, rule_id in enumerate(rule_ids())}
    return sorted(rejected.items(), key=lambda kv: (-kv[1], order.get(kv[0], len(order)), kv[0]))


def rejection_lines(result: SearchResult) -> list[str]:
    """Candidates enumerated, screened and rejected per rule and by memory."""
    slower = result.rejected.get(BOUND_REJECTION, 0)
    fitting = (
        result.num_valid - result.rejected.get(MEMORY_REJECTION, 0) - slower - result.num_unvisited
    )
    limit = result.memory_limit_bytes
    skipped = f"{_count(slower)} skipped as slower than the simulated ones, " if slower else ""
    lines = [
        f"Searched {_count(result.num_enumerated)} candidate plans in {result.elapsed_s:.1f} s: "
        f"{_count(result.num_valid)} passed the rules, {_count(max(fitting, 0))} fit in "
        f"{gib(limit)} ({1 - result.memory_headroom:.0%} of device memory), {skipped}"
        f"{_count(result.num_simulated)} simulated."
    ]
    ordered = _most_rejections_first({k: v for k, v in result.rejected.items() if v})
    if ordered:
        lines.append("Rejected: " + " · ".join(f"{k} {_count(v)}" for k, v in ordered))
        for rule_id, _ in ordered[:3]:
            if rule_id in result.rule_examples:
                lines.append(f"  e.g. {rule_id}: {result.rule_examples[rule_id]}")
    return lines


def simulated_note(result: SearchResult) -> str:
    """How many of the plans picked for simulation were simulated and how many the time
    limit cut (``2 of the 5 plans picked for simulation simulated, the other 3 cut by the
    limit``), or ``all N ... simulated`` when it cut none."""
    picked = result.num_simulated + result.num_unsimulated
    if not result.num_unsimulated:
        return f"all {_count(picked)} plans picked for simulation simulated"
    return (
        f"{_count(result.num_simulated)} of the {_count(picked)} plans picked for simulation "
        f"simulated, the other {_count(result.num_unsimulated)} cut by the limit"
    )


def time_limit_note(result: SearchResult) -> str:
    """One sentence on a search the time limit cut short: candidates screened of the valid
    ones, those never reached, the plans picked for simulation simulated and those cut
    (`simulated_note`), and what the ranked plans are the best of (the simulated ones
    only, when the screen had finished); empty when the limit was not reached or not set."""
    if not result.time_limit_reached:
        return ""
    limit = f"{result.time_limit_s:g} s" if result.time_limit_s is not None else "-"
    if not result.num_unvisited:
        return (
            f"Time limit of {limit} reached after the screen: {simulated_note(result)}; the "
            "plans ranked are the best of those simulated (raise the time limit to simulate "
            "them all)."
        )
    return (
        f"Time limit of {limit} reached: {_count(result.num_screened)} of "
        f"{_count(result.num_valid)} valid candidates screened, "
        f"{_count(result.num_unvisited)} not reached; {simulated_note(result)}; the plans "
        "ranked are the best of those screened, not of the whole space (raise the time "
        "limit, or fix knobs to narrow the space)."
    )


def time_limit_lines(result: SearchResult) -> list[str]:
    """`time_limit_note` as a list of zero or one line."""
    note = time_limit_note(result)
    return [note] if note else []


def group_seconds(estimate: Estimate) -> dict[str, float]:
    """Breakdown seconds summed per `PHASE_GROUPS` group."""
    phases = estimate.breakdown.as_dict()
    return {
        group: sum(phases[name.removesuffix("_s")] for name in names)
        for group, names in PHASE_GROUPS.items()
    }


def summary_line(ranked: RankedPlan) -> str:
    """Label, iteration time, tokens/s, MFU (`specs.formats.mfu_text`: over the bf16 peak
    too for a job of another GEMM dtype) and peak memory of one plan."""
    est = ranked.estimate
    mfu = mfu_text(est.mfu, est.mfu_peak_dtype, est.mfu_bf16)
    return (
        f"{ranked.plan.label()}: {est.iteration_time_s:.3g} s/iteration, "
        f"{est.tokens_per_s:,.0f} tokens/s, MFU {mfu}, "
        f"peak {gib(est.peak_memory_bytes)}"
    )


def breakdown_lines(estimate: Estimate) -> list[str]:
    """Each phase above rounding (`ROUNDING_FRACTION`) with seconds and share of the
    iteration."""
    total = estimate.iteration_time_s
    parts = [
        f"{name} {seconds:.3g} s ({seconds / total:.0%})"
        for name, seconds in estimate.breakdown.as_dict().items()
        if seconds > ROUNDING_FRACTION * total
    ]
    return ["  breakdown: " + ", ".join(parts)]


EXPERT_KNOBS = ("ep", "etp")
"""Knobs that only shape expert layers: a dense model has none, and its expert tensor
parallelism would merely echo tp."""


def knob_differences(a: ParallelPlan, b: ParallelPlan, *, experts: bool = True) -> list[str]:
    """``knob A vs B`` for every knob the two plans set differently; without ``experts``
    (a dense model) the `EXPERT_KNOBS` are left out."""
    out = []
    for name in KNOBS:
        if not experts and name in EXPERT_KNOBS:
            continue
        va = a.expert_tp if name == "etp" else getattr(a, name)
        vb = b.expert_tp if name == "etp" else getattr(b, name)
        if va != vb:
            out.append(f"{name} {va} vs {vb}")
    return out


def comparison_lines(
    winner: RankedPlan, runner_up: RankedPlan, limit: int = 3, *, experts: bool = True
) -> list[str]:
    """Why ``winner`` beats ``runner_up``: the largest breakdown differences, memory, knobs
    (the expert knobs only with ``experts``, a MoE model)."""
    a, b = group_seconds(winner.estimate), group_seconds(runner_up.estimate)
    diffs = sorted(((a[g] - b[g], g) for g in a), key=lambda d: -abs(d[0]))
    faster = winner.estimate.tokens_per_s / runner_up.estimate.tokens_per_s - 1
    # Differences below 0.01% of the iteration are rounding, not a reason.
    noise = 1e-4 * winner.estimate.iteration_time_s
    scale = winner.estimate.iteration_time_s
    parts = [
        f"{group} {shown_seconds(a[group], scale):.3g} s vs {shown_seconds(b[group], scale):.3g} s "
        f"({delta:+.3g} s)"
        for delta, group in diffs[:limit]
        if abs(delta) > noise
    ]
    reasons = "; ".join(parts) if parts else "identical breakdowns"
    if faster >= 0:
        head = f"Beats the runner-up ({runner_up.plan.label()}) by {faster:.1%} tokens/s: "
    else:
        head = (
            f"Ranks above the runner-up ({runner_up.plan.label()}), {-faster:.1%} fewer "
            f"tokens/s, as the simpler plan within the {RANK_TOLERANCE:.0%} tie band "
            f"(planner.ranking): "
        )
    lines = [head + reasons]
    ma, mb = winner.estimate.peak_memory_bytes, runner_up.estimate.peak_memory_bytes
    lines.append(f"  peak memory {gib(ma)} vs {gib(mb)} ({gib(ma - mb, signed=True)})")
    knobs = knob_differences(winner.plan, runner_up.plan, experts=experts)
    if knobs:
        lines.append("  knobs: " + ", ".join(knobs))
    return lines


def no_plan_reason(result: SearchResult) -> str:
    """Why a search found no plan, in one sentence. When candidates passed the rules, none
    fits in memory; when none did, the rule that rejected the most candidates is named with
    its count (a candidate counts once under each rule it breaks) and its first message.
    When the time limit cut the screen short, the sentence says so with the counts and the
    fix, as the candidates not reached might fit."""
    gpus = result.cluster.num_gpus
    if result.num_valid > 0 and result.time_limit_reached:
        return (
            f"No plan found within the time limit of {result.time_limit_s:g} s: none of the "
            f"{_count(result.num_screened)} candidates screened (of {_count(result.num_valid)} "
            f"valid) fits in {gib(result.memory_limit_bytes)} per GPU on {gpus} GPUs; raise "
            "the time limit, or fix knobs to narrow the space."
        )
    if result.num_valid > 0:
        return f"No plan fits in {gib(result.memory_limit_bytes)} per GPU on {gpus} GPUs."
    ordered = _most_rejections_first(
        {k: v for k, v in result.rejected.items() if v and k != MEMORY_REJECTION}
    )
    if not ordered:
        return f"No candidate plan exists on {gpus} GPUs for this search space."
    rule_id, count = ordered[0]
    share = (
        "every candidate breaks"
        if count >= result.num_enumerated
        else f"{_count(count)} of {_count(result.num_enumerated)} candidates break"
    )
    text = f"No plan passes the rules on {gpus} GPUs: {share} {rule_id}"
    example = result.rule_examples.get(rule_id)
    return f"{text}: {example}" if example else f"{text}."


def no_fit_lines(
    result: SearchResult, limit: int = 3, phrase: Callable[[str], str] = str
) -> list[str]:
    """The reason nothing was found (`no_plan_reason`), the closest candidates and what would
    make them fit (each change rewritten by ``phrase``, `planner.explain_fit`)."""
    cap = result.memory_limit_bytes
    lines = [no_plan_reason(result)]
    if not result.closest:
        return lines
    lines.append("Closest candidates:")
    for ranked in result.closest[:limit]:
        peak = ranked.estimate.peak_memory_bytes
        lines.append(f"  {ranked.plan.label()}: {gib(peak)} ({gib(peak - cap)} over)")
        lines += fit_suggestion_lines(
            result.model, result.cluster, result.job, ranked.plan, cap, phrase=phrase
        )
    floor = min_gpus_for_model_state(result.model, result.job, cap)
    if floor > result.cluster.num_gpus:
        lines.append(
            f"  The model state alone needs at least {floor} GPUs of this size "
            f"({MODEL_STATE_BYTES_PER_PARAM[result.job.precision]} bytes per parameter)."
        )
    return lines


def runner_up_of(result: SearchResult) -> RankedPlan | None:
    """The best plan after the winner that differs in its label (degrees, micro-batch,
    sequence parallelism, recompute, optimizer sharding); else simply the second."""
    if result.best is None or len(result.top) < 2:
        return None
    label = result.best.plan.label()
    different = [r for r in result.top[1:] if r.plan.label() != label]
    return different[0] if different else result.top[1]


def explain(result: SearchResult, phrase: Callable[[str], str] = str) -> str:
    """The whole explanation of a search, as text; ``phrase`` rewrites the changes that
    would make the closest candidates fit (`no_fit_lines`)."""
    lines = rejection_lines(result)
    if result.best is None:
        reason, *rest = no_fit_lines(result, phrase=phrase)
        return "\n".join([reason, *lines, *rest])
    lines += time_limit_lines(result)
    lines.append("Best: " + summary_line(result.best))
    lines += breakdown_lines(result.best.estimate)
    runner_up = runner_up_of(result)
    if runner_up is not None:
        lines += comparison_lines(result.best, runner_up, experts=result.model.is_moe)
    return "\n".join(lines)
