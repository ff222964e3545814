"""Pipeline split options of the search: the even split and the uneven splits Megatron
accepts (`specs.pipeline_split`), as table columns.

For each (pp, vpp) the search tries, in this order and without two options that give the
same layers to every chunk:

- the even split, when num_layers divides by pp·vpp;
- both account-for flags (the embedding and the loss each count as a layer), then one of
  them, when num_layers + 2 (+ 1) divides by pp and the per-rank count by vpp;
- the two most balanced equal first/last stage counts x, with the other ranks holding
  middle = (num_layers - 2x) / (pp - 2) >= x layers and middle - x <= 2·vpp
  (`specs.pipeline_split_checks.first_last_options`);
- for models with MTP layers or leading dense layers, a layout that spreads the embedding,
  the layers, the MTP layers and the loss as units evenly over the pp·vpp virtual stages
  (`balanced_layout`).

Table encoding (plain numpy dtypes, like the other optional knobs): first/last counts 0 for
None, the layout "" for None.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from specs.model import ModelSpec
from specs.pipeline_layout import compress_layout
from specs.pipeline_split import pipeline_split
from specs.pipeline_split_checks import first_last_options, split_problem
from specs.plan import ParallelPlan

SPLIT_COLUMNS = (
    "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
    "pipeline_model_parallel_layout",
)
"""`ParallelPlan` fields of the uneven split, as candidate table columns."""

EVEN_SPLIT: dict[str, Any] = {
    "decoder_first_pipeline_num_layers": 0,
    "decoder_last_pipeline_num_layers": 0,
    "account_for_embedding_in_pipeline_split": False,
    "account_for_loss_in_pipeline_split": False,
    "pipeline_model_parallel_layout": "",
}
"""The even split in table encoding."""


def split_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """`ParallelPlan` keyword arguments of the split columns of a table row (0 and "" mean
    None; a row without the columns is the even split)."""
    return {
        "decoder_first_pipeline_num_layers": int(row.get("decoder_first_pipeline_num_layers", 0))
        or None,
        "decoder_last_pipeline_num_layers": int(row.get("decoder_last_pipeline_num_layers", 0))
        or None,
        "account_for_embedding_in_pipeline_split": bool(
            row.get("account_for_embedding_in_pipeline_split", False)
        ),
        "account_for_loss_in_pipeline_split": bool(
            row.get("account_for_loss_in_pipeline_split", False)
        ),
        "pipeline_model_parallel_layout": str(row.get("pipeline_model_parallel_layout", "") or "")
        or None,
    }


def split_columns(plan: ParallelPlan) -> dict[str, Any]:
    """The split columns of a plan in table encoding (inverse of `split_fields`)."""
    return {
        "decoder_first_pipeline_num_layers": plan.decoder_first_pipeline_num_layers or 0,
        "decoder_last_pipeline_num_layers": plan.decoder_last_pipeline_num_layers or 0,
        "account_for_embedding_in_pipeline_split": plan.account_for_embedding_in_pipeline_split,
        "account_for_loss_in_pipeline_split": plan.account_for_loss_in_pipeline_split,
        "pipeline_model_parallel_layout": plan.pipeline_model_parallel_layout or "",
    }


def balanced_layout(model: ModelSpec, pp: int, vpp: int) -> str | None:
    """A layout that cuts the units E, t·num_layers, m·mtp_num_layers, L into pp·vpp
    consecutive virtual stages of equal size (at least two units each), as Megatron-Bridge's
    DeepSeek-V3 recipe does (``Et|(tt|)*30mL`` on pp8 vpp4); None when the units do not
    divide that way. Requiring equal stages keeps the number of layouts (and of vpp values)
    the search tries small."""
    units = "E" + "t" * model.num_layers + "m" * model.mtp_num_layers + "L"
    stages = pp * vpp
    size, rest = divmod(len(units), stages)
    if rest or size < 2:
        return None
    return compress_layout(tuple(units[v * size : (v + 1) * size] for v in range(stages)))


def _candidates(model: ModelSpec, pp: int, vpp: int) -> Iterator[dict[str, Any]]:
    layers = model.num_layers
    if layers % (pp * vpp) == 0:
        yield {}
    if pp > 1:
        for emb, loss in ((True, True), (True, False), (False, True)):
            total = layers + emb + loss
            if total % pp == 0 and (total // pp) % vpp == 0:
                yield {
                    "account_for_embedding_in_pipeline_split": emb,
                    "account_for_loss_in_pipeline_split": loss,
                }
        for x, middle in first_last_options(layers, pp, vpp, limit=2):
            if middle - x > 2 * vpp:  # the ends would idle most of each microbatch
                continue
            yield {"decoder_first_pipeline_num_layers": x, "decoder_last_pipeline_num_layers": x}
    if pp > 1 and (model.mtp_num_layers or model.moe_first_dense_layers):
        layout = balanced_layout(model, pp, vpp)
        if layout is not None:
            yield {"pipeline_model_parallel_layout": layout}


def split_options(model: ModelSpec, pp: int, vpp: int) -> list[dict[str, Any]]:
    """The split options of (pp, vpp) in table encoding (module docstring); [] when none is
    valid."""
    found, seen = [], set()
    for fields in _candidates(model, pp, vpp):
        plan = ParallelPlan(pp=pp, vpp=vpp, schedule="interleaved" if vpp > 1 else "1f1b", **fields)
        if split_problem(model, plan) is not None:
            continue
        split = pipeline_split(model, plan)
        key = tuple((c.num_layers, c.mtp_layers) for rank in split.chunks for c in rank)
        if key in seen:
            continue
        seen.add(key)
        found.append(EVEN_SPLIT | split_columns(plan))
    return found


def has_split(model: ModelSpec, pp: int, vpp: int = 1) -> bool:
    """True when (pp, vpp) has at least one valid split option."""
    return bool(split_options(model, pp, vpp))
