"""The checks of a plan's pipeline split (`specs.pipeline_split`) in the order Megatron-LM
runs them, and the split fields' shared readings.

- `SPLIT_CHECKS`: every check of the uneven split fields, each named by the id of the rule
  that reports it (`specs.rules_pipeline`): the layout checks of
  `specs.pipeline_layout_checks` and here those of ``decoder_first_pipeline_num_layers`` /
  ``decoder_last_pipeline_num_layers`` (`TransformerConfig.__post_init__`,
  `get_num_layers_to_build`); each returns None or a message with the values and a fix.
- `even_split_problem`: the even split's divisibility (with the account-for flags);
  `split_problem`: the first problem of all of them.
- `accounted_layers`, `given_first_last`, `middle_layers`, `uses_first_last`: what the
  split fields say, as the checks and the assignment read them.
- `first_last_options`: equal first/last counts that give a valid split, the fixes that
  messages and the planner suggest.
"""

from __future__ import annotations

from collections.abc import Callable

from specs.model import ModelSpec
from specs.pipeline_layout_checks import (
    layout_covers_num_layers,
    layout_embedding_first_loss_last,
    layout_excludes_other_split_flags,
    layout_parses,
    layout_places_mtp,
    layout_stages_match_pp_vpp,
)
from specs.plan import ParallelPlan
from specs.virtual_stages import split_layer_count


def accounted_layers(model: ModelSpec, plan: ParallelPlan) -> int:
    """Layers the even split divides: num_layers, plus one for each account-for flag."""
    return split_layer_count(
        model.num_layers,
        embedding=plan.account_for_embedding_in_pipeline_split,
        loss=plan.account_for_loss_in_pipeline_split,
    )


def given_first_last(plan: ParallelPlan) -> tuple[int | None, int | None]:
    """(decoder_first_pipeline_num_layers, decoder_last_pipeline_num_layers) of the plan."""
    return plan.decoder_first_pipeline_num_layers, plan.decoder_last_pipeline_num_layers


def middle_layers(model: ModelSpec, plan: ParallelPlan) -> tuple[int, int]:
    """(layers, ranks) left for the middle ranks under first/last counts."""
    first, last = given_first_last(plan)
    layers = model.num_layers - (first or 0) - (last or 0)
    ranks = plan.pp - (first is not None) - (last is not None)
    return layers, ranks


def uses_first_last(plan: ParallelPlan) -> bool:
    """True when a first or last stage layer count is given."""
    return any(v is not None for v in given_first_last(plan))


def uneven_split_excludes_account_flags(model: ModelSpec, plan: ParallelPlan) -> str | None:
    """First/last stage counts cannot be combined with the account-for flags
    (`TransformerConfig.__post_init__`; `get_num_layers_to_build` asserts it too)."""
    acc = plan.account_for_embedding_in_pipeline_split or plan.account_for_loss_in_pipeline_split
    if not uses_first_last(plan) or not acc:
        return None
    first, last = given_first_last(plan)
    return (
        f"decoder_first_pipeline_num_layers ({first}) / decoder_last_pipeline_num_layers "
        f"({last}) cannot be combined with account_for_embedding_in_pipeline_split "
        f"({plan.account_for_embedding_in_pipeline_split}) or "
        f"account_for_loss_in_pipeline_split ({plan.account_for_loss_in_pipeline_split}): "
        "count the embedding and loss into the first/last numbers yourself and drop the "
        "account-for flags, or drop the first/last counts"
    )


def uneven_layers_cover_model(model: ModelSpec, plan: ParallelPlan) -> str | None:
    """First/last counts leave layers exactly when middle ranks remain
    (`TransformerConfig.__post_init__`: "Mismatch: ... middle layers remaining but ...
    middle PP stages available")."""
    if not uses_first_last(plan) or plan.pipeline_model_parallel_layout is not None:
        return None
    layers, ranks = middle_layers(model, plan)
    if layers >= 0 and ranks >= 0 and (layers > 0) == (ranks > 0):
        return None
    first, last = given_first_last(plan)
    return (
        f"decoder_first_pipeline_num_layers ({first}) and decoder_last_pipeline_num_layers "
        f"({last}) leave {layers} of num_layers ({model.num_layers}) for {ranks} middle ranks "
        f"of pp ({plan.pp}): middle layers and middle ranks must both be zero or both "
        "positive; lower the first/last counts or change pp"
    )


def uneven_middle_layers_divisible_by_middle_stages(
    model: ModelSpec, plan: ParallelPlan
) -> str | None:
    """The layers left by first/last counts split evenly over the middle ranks
    (`TransformerConfig.__post_init__`, `get_num_layers_to_build`)."""
    if not uses_first_last(plan) or plan.pipeline_model_parallel_layout is not None:
        return None
    layers, ranks = middle_layers(model, plan)
    if ranks <= 0 or layers <= 0 or layers % ranks == 0:
        return None
    first, last = given_first_last(plan)
    options = _first_last_fixes(model, plan)
    fix = f"try {options}" if options else "change pp or the first/last counts"
    return (
        f"num_layers ({model.num_layers}) - decoder_first_pipeline_num_layers ({first}) - "
        f"decoder_last_pipeline_num_layers ({last}) = {layers} middle layers must be "
        f"divisible by the {ranks} middle ranks ({layers / ranks:.2f} per rank): {fix}"
    )


def uneven_stage_layers_divisible_by_vpp(model: ModelSpec, plan: ParallelPlan) -> str | None:
    """With first/last counts and vpp > 1, the first, the last and each middle rank's count
    are multiples of vpp (`TransformerConfig.__post_init__`)."""
    if (
        not uses_first_last(plan)
        or plan.vpp == 1
        or plan.pipeline_model_parallel_layout is not None
    ):
        return None
    first, last = given_first_last(plan)
    layers, ranks = middle_layers(model, plan)
    counts = {"decoder_first_pipeline_num_layers": first, "decoder_last_pipeline_num_layers": last}
    if ranks > 0 and layers > 0 and layers % ranks == 0:
        counts["layers per middle rank"] = layers // ranks
    bad = [f"{k} ({v})" for k, v in counts.items() if v is not None and v % plan.vpp]
    if not bad:
        return None
    return (
        f"with vpp ({plan.vpp}) every rank's layers split into vpp chunks, but "
        f"{', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not a multiple of {plan.vpp}: "
        "choose counts that are multiples of vpp, or vpp=1"
    )


def _first_last_fixes(model: ModelSpec, plan: ParallelPlan) -> str:
    """Equal first/last counts x that leave a middle split, closest to balanced."""
    options = first_last_options(model.num_layers, plan.pp, plan.vpp)
    if not options:
        return ""
    x, middle = options[0]
    return (
        f"decoder_first_pipeline_num_layers={x} and decoder_last_pipeline_num_layers={x} "
        f"({middle} per middle rank)"
    )


def first_last_options(num_layers: int, pp: int, vpp: int, limit: int = 3) -> list[tuple[int, int]]:
    """(x, middle) with first = last = x, middle = (L - 2x) / (pp - 2) layers per middle
    rank, all multiples of vpp and 1 <= x <= middle; those with x closest to middle - 1
    first (the first and last stages also run the embedding and the output layer, about
    one layer's work each), the smaller x first among equals; at most ``limit``. Empty for
    pp < 3."""
    if pp < 3:
        return []
    found = []
    for x in range(vpp, num_layers // 2 + 1, vpp):
        rest = num_layers - 2 * x
        if rest > 0 and rest % (pp - 2) == 0:
            middle = rest // (pp - 2)
            if middle % vpp == 0 and x <= middle:
                found.append((x, middle))
    return sorted(found, key=lambda o: (abs(o[1] - o[0] - 1), o[0]))[:limit]


SPLIT_CHECKS: tuple[Callable[[ModelSpec, ParallelPlan], str | None], ...] = (
    layout_parses,
    layout_excludes_other_split_flags,
    uneven_split_excludes_account_flags,
    layout_stages_match_pp_vpp,
    layout_embedding_first_loss_last,
    layout_covers_num_layers,
    layout_places_mtp,
    uneven_layers_cover_model,
    uneven_middle_layers_divisible_by_middle_stages,
    uneven_stage_layers_divisible_by_vpp,
)
"""The checks of the uneven split fields, in check order; each function name is the id of
the rule that reports it. The even split's divisibility is `even_split_problem`."""


def even_split_problem(model: ModelSpec, plan: ParallelPlan) -> tuple[str, str] | None:
    """(rule id, relation) when the even split (with its account-for flags) does not divide:
    `layers_divisible_by_pp` or `layers_per_stage_divisible_by_vpp`; None when it does or
    when first/last counts or a layout replace it."""
    if uses_first_last(plan) or plan.pipeline_model_parallel_layout is not None:
        return None
    total = accounted_layers(model, plan)
    if total % plan.pp:
        return "layers_divisible_by_pp", f"{total} layers do not divide by pp ({plan.pp})"
    if (total // plan.pp) % plan.vpp:
        return (
            "layers_per_stage_divisible_by_vpp",
            f"{total // plan.pp} layers per stage do not divide by vpp ({plan.vpp})",
        )
    return None


def split_problem(model: ModelSpec, plan: ParallelPlan) -> tuple[str, str] | None:
    """(rule id, message) of the first check the plan's split breaks, or None."""
    for check in SPLIT_CHECKS:
        message = check(model, plan)
        if message is not None:
            return check.__name__, message
    return even_split_problem(model, plan)
