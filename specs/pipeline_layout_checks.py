"""The checks of a plan's ``pipeline_model_parallel_layout`` (`specs.pipeline_split`):
Megatron-LM's `validate_layer_layout`, `validate_args` and `TransformerConfig.__post_init__`
checks of the layout string, one function each.

Each check takes the model and the plan and returns None when the plan passes, else the
message of the rule of the same name (`specs.rules_pipeline`): the relation, the values
and a fix. A check on a plan without a layout passes; the checks after `layout_parses`
pass on a layout that does not parse, which that check reports. `layout_stages` is the
expanded layout the split itself reads. The order in which all split checks run is
`specs.pipeline_split_checks.SPLIT_CHECKS`.
"""

from __future__ import annotations

from specs.errors import SpecError
from specs.model import ModelSpec
from specs.pipeline_layout import expand_layout
from specs.plan import ParallelPlan


def layout_stages(plan: ParallelPlan) -> tuple[str, ...] | None:
    """The expanded layout, or None when the plan has none or it does not parse."""
    if plan.pipeline_model_parallel_layout is None:
        return None
    try:
        return expand_layout(plan.pipeline_model_parallel_layout)
    except SpecError:
        return None


def layout_parses(model: ModelSpec, plan: ParallelPlan) -> str | None:
    """The layout uses only Megatron's layout symbols (`parse_str_to_list`)."""
    if plan.pipeline_model_parallel_layout is None:
        return None
    try:
        expand_layout(plan.pipeline_model_parallel_layout)
    except SpecError as exc:
        return str(exc)
    return None


def layout_excludes_other_split_flags(model: ModelSpec, plan: ParallelPlan) -> str | None:
    """A layout cannot be combined with first/last counts or the account-for flags
    (`TransformerConfig.__post_init__`: "pipeline_model_parallel_layout cannot be set with
    other pipeline layout arguments")."""
    if plan.pipeline_model_parallel_layout is None:
        return None
    others = {
        "decoder_first_pipeline_num_layers": plan.decoder_first_pipeline_num_layers,
        "decoder_last_pipeline_num_layers": plan.decoder_last_pipeline_num_layers,
        "account_for_embedding_in_pipeline_split": plan.account_for_embedding_in_pipeline_split,
        "account_for_loss_in_pipeline_split": plan.account_for_loss_in_pipeline_split,
    }
    set_ = [f"{k} ({v})" for k, v in others.items() if v not in (None, False)]
    if not set_:
        return None
    return (
        f"pipeline_model_parallel_layout ({plan.pipeline_model_parallel_layout!r}) cannot be "
        f"combined with {', '.join(set_)}: the layout already places every layer; drop "
        "those fields or the layout"
    )


def layout_stages_match_pp_vpp(model: ModelSpec, plan: ParallelPlan) -> str | None:
    """The layout has pp·vpp virtual stages (`validate_args`: stages % pp == 0, and the
    virtual pipeline size is stages / pp)."""
    stages = layout_stages(plan)
    if stages is None or len(stages) == plan.pp * plan.vpp:
        return None
    n = len(stages)
    fix = (
        f"set vpp={n // plan.pp}"
        if n % plan.pp == 0
        else f"use pp among the divisors of {n} or write pp·vpp = {plan.pp * plan.vpp} stages"
    )
    return (
        f"pipeline_model_parallel_layout has {n} virtual stages; it needs pp ({plan.pp}) · "
        f"vpp ({plan.vpp}) = {plan.pp * plan.vpp}: {fix}"
    )


def layout_embedding_first_loss_last(model: ModelSpec, plan: ParallelPlan) -> str | None:
    """The layout holds exactly one `E`, as its first symbol, and one `L`, as its last
    (`validate_layer_layout`)."""
    stages = layout_stages(plan)
    if stages is None:
        return None
    flat = "".join(stages)
    if flat[:1] == "E" and flat[-1:] == "L" and flat.count("E") == 1 and flat.count("L") == 1:
        return None
    return (
        f"pipeline_model_parallel_layout ({plan.pipeline_model_parallel_layout!r}) must hold one "
        f"E as its first symbol and one L as its last (found {flat.count('E')} E, "
        f"{flat.count('L')} L, first {flat[:1]!r}, last {flat[-1:]!r}): start the first "
        "stage with E and end the last stage with L"
    )


def layout_covers_num_layers(model: ModelSpec, plan: ParallelPlan) -> str | None:
    """The layout holds exactly num_layers `t` (`validate_layer_layout`)."""
    stages = layout_stages(plan)
    if stages is None:
        return None
    count = "".join(stages).count("t")
    if count == model.num_layers:
        return None
    diff = model.num_layers - count
    return (
        f"pipeline_model_parallel_layout holds {count} transformer layers (t) but num_layers is "
        f"{model.num_layers}: {'add' if diff > 0 else 'remove'} {abs(diff)} t"
    )


def layout_places_mtp(model: ModelSpec, plan: ParallelPlan) -> str | None:
    """MTP layers in a layout: as many `m` as the model's mtp_num_layers, after every
    transformer layer, all in one stage, that stage the last chunk of its rank
    (`validate_layer_layout`)."""
    stages = layout_stages(plan)
    if stages is None or len(stages) != plan.pp * plan.vpp:
        return None
    flat = "".join(stages)
    count, want = flat.count("m"), model.mtp_num_layers
    where = [v for v, s in enumerate(stages) if "m" in s]
    problem = None
    if count != want:
        problem = f"holds {count} m but the model's mtp_num_layers is {want}"
    elif count and "t" in flat[flat.index("m") :]:
        problem = "places a transformer layer after an MTP layer"
    elif len(where) > 1 or (where and stages[where[0]].count("m") != want):
        problem = f"spreads the MTP layers over virtual stages {where}"
    elif where and where[0] // plan.pp != plan.vpp - 1:
        problem = (
            f"places the MTP layers in chunk {where[0] // plan.pp} of rank {where[0] % plan.pp}, "
            "not its last chunk"
        )
    if problem is None:
        return None
    return (
        f"pipeline_model_parallel_layout ({plan.pipeline_model_parallel_layout!r}) {problem}: "
        f"write {want} m together, after the last t, in a stage of the last chunk "
        f"(one of the last pp ({plan.pp}) stages)"
    )
