"""Pipeline split: which transformer layers (and the embedding, the loss and the MTP layers)
every (pipeline rank, virtual chunk) holds, as one pure function of the model and the plan.

Megatron-LM's semantics (`get_num_layers_to_build` and `get_transformer_layer_offset` in
megatron/core/transformer, `PipelineParallelLayerLayout`, the checks of
`TransformerConfig.__post_init__` and `validate_args`; megatron-facts.md §8.2-8.3):

- Chunk ``c`` of rank ``r`` is virtual stage ``c·pp + r``. Layers are numbered in virtual
  stage order: virtual stage 0 holds the first layers, then virtual stage 1, and so on.
- Even split: every rank holds ``L / pp`` layers and every chunk ``L / (pp·vpp)``.
- ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``:
  the embedding (the loss) counts as one layer, so ``L + 1`` (or ``L + 2``) is split evenly
  and the first chunk of rank 0 (the last chunk of rank pp-1) builds one transformer layer
  fewer.
- ``decoder_first_pipeline_num_layers`` / ``decoder_last_pipeline_num_layers``: rank 0
  (rank pp-1) holds that many layers over its chunks; the remaining layers split evenly over
  the other ranks; every rank's count is split evenly over its vpp chunks.
- ``pipeline_model_parallel_layout``: one string per virtual stage, in virtual stage order
  (``Et|(tt|)*30mL``: stage 0 holds the embedding and one layer, the 30 following stages two
  layers each, the last one MTP layer and the loss); vpp = stages / pp.

The embedding is always built on chunk 0 of rank 0 and the output layer with the loss on
the last chunk of rank pp-1 (Megatron's pre_process / post_process); MTP layers sit on
the last chunk of rank pp-1 unless a layout places them. `pipeline_split` checks the
plan with the checks below (each named by the rule id that reports it, see
`specs.rules_pipeline`) and raises `SpecError` on the first one broken.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specs.errors import SpecError
from specs.model import ModelSpec
from specs.pipeline_layout import expand_layout
from specs.plan import ParallelPlan
from specs.virtual_stages import split_layer_count


@dataclass(frozen=True, kw_only=True, slots=True)
class ChunkSplit:
    """What one model chunk (one virtual pipeline stage) holds."""

    pp_rank: int
    """Pipeline rank, 0-based."""
    chunk: int
    """Model chunk on that rank, 0 .. vpp-1."""
    virtual_stage: int
    """chunk·pp + pp_rank: the chunk's place in the forward order."""
    layers: range
    """Global indices of its transformer layers (possibly empty)."""
    embedding: bool
    """Holds the word (and position) embedding: chunk 0 of rank 0."""
    loss: bool
    """Holds the final norm, the output layer and the loss: the last chunk of rank pp-1."""
    mtp_layers: int
    """Multi-token-prediction layers it holds."""

    @property
    def num_layers(self) -> int:
        """Transformer layers it holds."""
        return len(self.layers)


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineSplit:
    """The chunks of every rank: ``chunks[pp_rank][chunk]``."""

    pp: int
    """Pipeline ranks."""
    vpp: int
    """Chunks per rank."""
    chunks: tuple[tuple[ChunkSplit, ...], ...]
    """Indexed by pipeline rank, then chunk."""

    def chunk(self, pp_rank: int, chunk: int) -> ChunkSplit:
        """The split of one chunk."""
        return self.chunks[pp_rank][chunk]

    def rank_layers(self, pp_rank: int) -> tuple[int, ...]:
        """Transformer layer indices of one rank, in chunk order."""
        return tuple(i for c in self.chunks[pp_rank] for i in c.layers)

    def rank_num_layers(self, pp_rank: int) -> int:
        """Transformer layers of one rank over its chunks."""
        return sum(c.num_layers for c in self.chunks[pp_rank])

    def rank_mtp_layers(self, pp_rank: int) -> int:
        """MTP layers of one rank."""
        return sum(c.mtp_layers for c in self.chunks[pp_rank])

    def in_forward_order(self) -> tuple[ChunkSplit, ...]:
        """Every chunk by virtual stage."""
        return tuple(
            sorted((c for rank in self.chunks for c in rank), key=lambda c: c.virtual_stage)
        )

    @property
    def is_even(self) -> bool:
        """True when every chunk holds the same number of transformer layers."""
        return len({c.num_layers for rank in self.chunks for c in rank}) == 1


def _layout_stages(plan: ParallelPlan) -> tuple[str, ...] | None:
    """The expanded layout, or None when the plan has none or it does not parse."""
    if plan.pipeline_model_parallel_layout is None:
        return None
    try:
        return expand_layout(plan.pipeline_model_parallel_layout)
    except SpecError:
        return None


# ---- the checks (each reported by the rule of the same name, `specs.rules_pipeline`) -----


def accounted_layers(model: ModelSpec, plan: ParallelPlan) -> int:
    """Layers the even split divides: num_layers, plus one for each account-for flag."""
    return split_layer_count(
        model.num_layers,
        embedding=plan.account_for_embedding_in_pipeline_split,
        loss=plan.account_for_loss_in_pipeline_split,
    )


def _given_first_last(plan: ParallelPlan) -> tuple[int | None, int | None]:
    return plan.decoder_first_pipeline_num_layers, plan.decoder_last_pipeline_num_layers


def _middle(model: ModelSpec, plan: ParallelPlan) -> tuple[int, int]:
    """(layers, ranks) left for the middle ranks under first/last counts."""
    first, last = _given_first_last(plan)
    layers = model.num_layers - (first or 0) - (last or 0)
    ranks = plan.pp - (first is not None) - (last is not None)
    return layers, ranks


def uses_first_last(plan: ParallelPlan) -> bool:
    """True when a first or last stage layer count is given."""
    return any(v is not None for v in _given_first_last(plan))


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


def uneven_split_excludes_account_flags(model: ModelSpec, plan: ParallelPlan) -> str | None:
    """First/last stage counts cannot be combined with the account-for flags
    (`TransformerConfig.__post_init__`; `get_num_layers_to_build` asserts it too)."""
    acc = plan.account_for_embedding_in_pipeline_split or plan.account_for_loss_in_pipeline_split
    if not uses_first_last(plan) or not acc:
        return None
    first, last = _given_first_last(plan)
    return (
        f"decoder_first_pipeline_num_layers ({first}) / decoder_last_pipeline_num_layers "
        f"({last}) cannot be combined with account_for_embedding_in_pipeline_split "
        f"({plan.account_for_embedding_in_pipeline_split}) or "
        f"account_for_loss_in_pipeline_split ({plan.account_for_loss_in_pipeline_split}): "
        "count the embedding and loss into the first/last numbers yourself and drop the "
        "account-for flags, or drop the first/last counts"
    )


def layout_stages_match_pp_vpp(model: ModelSpec, plan: ParallelPlan) -> str | None:
    """The layout has pp·vpp virtual stages (`validate_args`: stages % pp == 0, and the
    virtual pipeline size is stages / pp)."""
    stages = _layout_stages(plan)
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
    stages = _layout_stages(plan)
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
    stages = _layout_stages(plan)
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
    stages = _layout_stages(plan)
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


def uneven_layers_cover_model(model: ModelSpec, plan: ParallelPlan) -> str | None:
    """First/last counts leave layers exactly when middle ranks remain
    (`TransformerConfig.__post_init__`: "Mismatch: ... middle layers remaining but ...
    middle PP stages available")."""
    if not uses_first_last(plan) or plan.pipeline_model_parallel_layout is not None:
        return None
    layers, ranks = _middle(model, plan)
    if layers >= 0 and ranks >= 0 and (layers > 0) == (ranks > 0):
        return None
    first, last = _given_first_last(plan)
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
    layers, ranks = _middle(model, plan)
    if ranks <= 0 or layers <= 0 or layers % ranks == 0:
        return None
    first, last = _given_first_last(plan)
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
    first, last = _given_first_last(plan)
    layers, ranks = _middle(model, plan)
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


# ---- the assignment -------------------------------------------------------------------


def _chunk_counts(model: ModelSpec, plan: ParallelPlan) -> list[list[tuple[int, int]]]:
    """(transformer layers, MTP layers) per [rank][chunk], for a plan that passed the checks."""
    pp, vpp = plan.pp, plan.vpp
    stages = _layout_stages(plan)
    if stages is not None:
        return [
            [(stages[c * pp + r].count("t"), stages[c * pp + r].count("m")) for c in range(vpp)]
            for r in range(pp)
        ]
    if uses_first_last(plan):
        first, last = _given_first_last(plan)
        layers, ranks = _middle(model, plan)
        per_rank = [layers // ranks if ranks > 0 else 0] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
        counts = [[(n // vpp, 0) for _ in range(vpp)] for n in per_rank]
    else:
        per_chunk = accounted_layers(model, plan) // (pp * vpp)
        counts = [[(per_chunk, 0) for _ in range(vpp)] for _ in range(pp)]
        if plan.account_for_embedding_in_pipeline_split:
            counts[0][0] = (counts[0][0][0] - 1, 0)
        if plan.account_for_loss_in_pipeline_split:
            counts[-1][-1] = (counts[-1][-1][0] - 1, 0)
    counts[-1][-1] = (counts[-1][-1][0], model.mtp_num_layers)
    return counts


def split_problem(model: ModelSpec, plan: ParallelPlan) -> tuple[str, str] | None:
    """(rule id, message) of the first check the plan's split breaks, or None."""
    for check in SPLIT_CHECKS:
        message = check(model, plan)
        if message is not None:
            return check.__name__, message
    return even_split_problem(model, plan)


def pipeline_split(model: ModelSpec, plan: ParallelPlan) -> PipelineSplit:
    """The layers of every (pipeline rank, chunk) under the plan's split (module docstring).

    Raises `SpecError` naming the broken rule when the split is not one Megatron accepts.
    """
    problem = split_problem(model, plan)
    if problem is not None:
        raise SpecError(f"{problem[0]}: {problem[1]}")
    counts = _chunk_counts(model, plan)
    pp, vpp = plan.pp, plan.vpp
    starts: dict[tuple[int, int], int] = {}
    next_layer = 0
    for c in range(vpp):
        for r in range(pp):
            starts[r, c] = next_layer
            next_layer += counts[r][c][0]
    chunks = tuple(
        tuple(
            ChunkSplit(
                pp_rank=r,
                chunk=c,
                virtual_stage=c * pp + r,
                layers=range(starts[r, c], starts[r, c] + counts[r][c][0]),
                embedding=r == 0 and c == 0,
                loss=r == pp - 1 and c == vpp - 1,
                mtp_layers=counts[r][c][1],
            )
            for c in range(vpp)
        )
        for r in range(pp)
    )
    return PipelineSplit(pp=pp, vpp=vpp, chunks=chunks)
