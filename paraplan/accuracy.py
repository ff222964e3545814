"""How far to trust a predicted iteration time: the errors of the published Megatron runs
like the user's job (docs/validation.md), which `paraplan estimate` and `paraplan plan` print
after their time assumptions (`paraplan.time_assumptions`) and give as
``published_accuracy`` in ``--json``.

The figures are read from ``paraplan/data/published_accuracy.json``, written by
``python bench/accuracy_table.py --from-json FILE`` (FILE: the output of ``python
bench/validate_published.py --json``) and by ``validate_published.py --markdown`` beside
docs/validation.md. A job is matched to the narrowest group of runs with at least `MIN_ROWS`
rows: (profile generation, dense/moe, precision), else (generation, dense/moe), else
(generation); none on the generation: one line says so. The out-of-sample figures come first
(``loso``: each run predicted by the figures fitted without its own source family), then the
in-sample ones (``model``: the shipped figures, its own family in the fit). Errors are
relative, (predicted - published) / published seconds per iteration: a negative signed
median means the runs were predicted faster than published. Megatron runtime on a GPU
profile only, as the time assumptions.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from importlib.resources import files
from typing import Any

from costmodel.execution import ExecutionOptions
from paraplan.time_assumptions import fitted_figures_apply
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec

MIN_ROWS = 5
"""Fewest published runs a group needs to speak for a job; a narrower group with fewer
gives way to the next wider one."""
TABLE_PATH = "data/published_accuracy.json"
"""The table inside the `paraplan` package."""
PAGE = "docs/validation.md"
"""The page that lists the runs behind the table."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ErrorFigures:
    """Relative errors of a group of runs, (predicted - published) / published seconds per
    iteration (`bench/validation_stats.error_figures`)."""

    median_abs_error: float
    """Median |error|."""
    signed_median_error: float
    """Median error; negative: predicted faster than published."""
    p90_abs_error: float
    """90th percentile of |error| (linear interpolation, numpy's default)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AccuracyGroup:
    """One group of the table: the published runs on one profile generation, of one kind
    and precision where given."""

    generation: str
    """Profile generation (`profiles.schema_device.DeviceSpec.generation`)."""
    kind: str | None
    """``dense`` or ``moe``; None: both."""
    precision: str | None
    """Job precision as priced (``bf16``, ``fp8``, ``nvfp4``); None: every precision."""
    num_rows: int
    """Published runs in the group."""
    loso: ErrorFigures
    """Out of sample: each run predicted by the figures fitted without its source family."""
    model: ErrorFigures
    """In sample: the shipped figures, each run's own family in their fit."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AccuracyTable:
    """The shipped table: its provenance and its groups."""

    command: str
    """The command whose JSON the table was built from."""
    num_rows: int
    """Published runs in the validation (the row count of docs/validation.md)."""
    groups: tuple[AccuracyGroup, ...]
    """Every (generation, kind, precision), (generation, kind) and (generation) group with
    a run, whatever its size (`find_group` applies `MIN_ROWS`)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PublishedAccuracy:
    """What the published runs say about one job on one profile."""

    generation: str
    """The profile's generation (empty: the profile names none)."""
    kind: str
    """The job's model: ``dense`` or ``moe``."""
    precision: str
    """The job's precision."""
    group: AccuracyGroup | None
    """The narrowest group with at least `MIN_ROWS` runs (`find_group`); None: no
    published run on the generation checks the figures."""
    source: str = PAGE
    """The page that lists the runs (`PAGE`)."""
    hybrid: bool = False
    """The model has hybrid Mamba-2 layers, which no published run of the page has."""
    latent_moe: bool = False
    """The model has latent MoE layers (``moe_latent_size``), which no published run of the
    page has."""
    sparse_attention: bool = False
    """The model has DeepSeek sparse attention layers (`specs.model.ModelSpec.uses_dsa`),
    which no published run of the page has, and whose core the model FLOPs (MFU) count as
    dense causal attention, as Megatron-LM's ``num_floating_point_operations`` does."""


def parse_table(data: dict[str, Any]) -> AccuracyTable:
    """An `AccuracyTable` from the JSON of `bench/accuracy_table.py`."""
    groups = tuple(
        AccuracyGroup(
            generation=g["generation"],
            kind=g["kind"],
            precision=g["precision"],
            num_rows=g["num_rows"],
            loso=ErrorFigures(**g["loso"]),
            model=ErrorFigures(**g["model"]),
        )
        for g in data["groups"]
    )
    source = data["source"]
    return AccuracyTable(command=source["command"], num_rows=source["num_rows"], groups=groups)


@functools.cache
def shipped_table() -> AccuracyTable:
    """The table shipped with the package (`TABLE_PATH`), read once."""
    return parse_table(json.loads(files("paraplan").joinpath(TABLE_PATH).read_text()))


def find_group(
    table: AccuracyTable, generation: str, kind: str, precision: str, min_rows: int = MIN_ROWS
) -> AccuracyGroup | None:
    """The narrowest group of ``table`` with at least ``min_rows`` runs among (generation,
    kind, precision), (generation, kind) and (generation); None when none has."""
    by_key = {(g.generation, g.kind, g.precision): g for g in table.groups}
    for key in ((generation, kind, precision), (generation, kind, None), (generation, None, None)):
        group = by_key.get(key)
        if group is not None and group.num_rows >= min_rows:
            return group
    return None


def published_accuracy(
    model: ModelSpec,
    job: TrainingJob,
    options: ExecutionOptions,
    profile: HardwareProfile,
    table: AccuracyTable | None = None,
) -> PublishedAccuracy | None:
    """The published runs like ``job`` of ``model`` on ``profile`` in ``table`` (default:
    `shipped_table`); None for a runtime other than megatron or a profile that is not a GPU
    (`paraplan.time_assumptions.fitted_figures_apply`)."""
    if not fitted_figures_apply(options, profile):
        return None
    generation = profile.device.generation
    kind = "moe" if model.num_experts else "dense"
    group = None
    if generation:
        group = find_group(table or shipped_table(), generation, kind, job.precision)
    return PublishedAccuracy(
        generation=generation,
        kind=kind,
        precision=job.precision,
        group=group,
        hybrid=model.is_hybrid,
        latent_moe=model.moe_latent_size is not None,
        sparse_attention=model.uses_dsa,
    )


def accuracy_json(accuracy: PublishedAccuracy | None) -> dict[str, Any] | None:
    """The ``published_accuracy`` entry of ``--json``: `PublishedAccuracy` as a dict, None
    where `accuracy_lines` prints nothing."""
    return None if accuracy is None else dataclasses.asdict(accuracy)


def _percent(value: float) -> str:
    return f"{value * 100:.1f}%"


def _signed(value: float) -> str:
    """A signed median with what its sign means."""
    if value < 0:
        return f"{value * 100:+.1f}% (predicted faster than published)"
    if value > 0:
        return f"{value * 100:+.1f}% (predicted slower than published)"
    return "0.0%"


def group_label(accuracy: PublishedAccuracy, group: AccuracyGroup) -> str:
    """Which runs ``group`` holds, and where it is wider than the job, why: e.g. ``40 dense
    fp8 runs on blackwell`` or ``58 moe runs on blackwell, every precision (fewer than 5 are
    fp16)``."""
    if group.precision is not None:
        return f"{group.num_rows} {group.kind} {group.precision} runs on {group.generation}"
    if group.kind is not None:
        return (
            f"{group.num_rows} {group.kind} runs on {group.generation}, every precision "
            f"(fewer than {MIN_ROWS} are {accuracy.precision})"
        )
    return (
        f"{group.num_rows} runs on {group.generation}, dense and moe, every precision "
        f"(fewer than {MIN_ROWS} are {accuracy.kind})"
    )


def accuracy_lines(accuracy: PublishedAccuracy | None) -> list[str]:
    """The block `estimate` and `plan` print after the time assumptions: the group's
    out-of-sample |error| median and p90 and signed median, then its in-sample |error|
    median and p90; one line where no group checks the figures; none for None."""
    if accuracy is None:
        return []
    unchecked = (
        [
            "  none of them has Mamba-2 or gated DeltaNet layers: this hybrid model's are "
            "priced from their kernels' shapes, unchecked by any published run "
            "(docs/cost-model.md)"
        ]
        if accuracy.hybrid
        else []
    )
    if accuracy.latent_moe:
        unchecked.append(
            "  none of them has latent MoE layers: this model's latent projections and "
            "latent-wide experts are priced from their kernels' shapes, unchecked by any "
            "published run (docs/cost-model.md)"
        )
    if accuracy.sparse_attention:
        unchecked.append(
            "  none of them has DeepSeek sparse attention layers: their indexer and top-k core "
            "are priced from their kernels' shapes, unchecked by any published run; MFU counts "
            "their core as dense causal attention (Megatron-LM's FLOPs count has no DSA term), "
            "above the work done where the sequence exceeds the top-k (docs/cost-model.md)"
        )
    group = accuracy.group
    if group is None:
        on = accuracy.generation or "this profile's generation (it names none)"
        return [
            f"accuracy on published runs: no published run on {on} checks these figures "
            f"({accuracy.source})",
            *unchecked,
        ]
    loso, model = group.loso, group.model
    return [
        f"accuracy on published runs like this one ({accuracy.source}; each run predicted "
        "with the figures fitted without its own source family):",
        f"  {group_label(accuracy, group)}: |error| median {_percent(loso.median_abs_error)}, "
        f"p90 {_percent(loso.p90_abs_error)}; signed median {_signed(loso.signed_median_error)}",
        f"  with its own source family in the fit: |error| median "
        f"{_percent(model.median_abs_error)}, p90 {_percent(model.p90_abs_error)}",
        *unchecked,
    ]
