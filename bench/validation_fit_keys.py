"""What the joint fit of `validation_fit.fit_model` fits and holds, and the `FittedModel` it
returns: the rows of each term of the objective (`FitRows`), a fit point (`Point`, `MoeTerms`),
the fitted and held (kind, key) values of one descent (`DescentKeys`, `descent_keys`) and the
fitted values with the rows each was fitted on (`fitted_model`).
"""

from __future__ import annotations

from dataclasses import dataclass

from validation_fit_params import FitGrid, FittedModel, is_fp4_key
from validation_stats import FP4_SUFFIX, Outcome

MoeTerms = tuple[float, float, float]
"""The MoE parameters of a fit point: (moe_host_launch_s, moe_expert_launch_s,
moe_token_device_s)."""

FP8, SUSTAINED = "fp8", "sustained"
"""The two kinds of fitted factor: FP8 GEMM rate, sustained 16-bit GEMM rate."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FitRows:
    """The rows of each term of the objective of `validation_fit.fit_model`."""

    fp8: dict[str, list[Outcome]]
    """Fit key (`Outcome.fit_key`) -> its dense FP8 rows; an NVFP4 key its dense NVFP4
    rows."""
    sixteen: dict[str, list[Outcome]]
    """GPU generation (`Outcome.fit_key`) -> its dense 16-bit rows."""
    moe: list[Outcome]
    """Every MoE row."""


Point = dict[tuple[str, str], float]
"""A point of the fit: (FP8 or SUSTAINED, generation) -> factor."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DescentKeys:
    """What one `_coordinate_descent` of `fit_model` fits and what it holds."""

    fp8_gens: list[str]
    """Fit keys of the FP8 rows (dense and MoE), sorted."""
    fp4_gens: list[str]
    """Fit keys of the NVFP4 rows, sorted."""
    own_fp8: list[str]
    """The FP8 fit keys that fit a factor of their own (or share the one ``all`` value)."""
    fp8: dict[tuple[str, str], str]
    """(FP8, key) -> the fitted FP8 value it uses: the key itself per generation, else
    ``all``."""
    fp4: dict[tuple[str, str], str]
    """(FP8, NVFP4 key) -> the fitted NVFP4 value it uses: the key per generation, else
    `FP4_SUFFIX` (one value for all NVFP4 rows)."""
    sixteen: dict[tuple[str, str], str]
    """(SUSTAINED, generation) -> the generation, for each generation with dense 16-bit
    rows."""
    fixed: Point
    """Held values: the shared sustained factor of each generation without dense 16-bit
    rows and, per generation, the shared FP8 factor of each generation without dense FP8
    rows."""

    @property
    def free(self) -> dict[tuple[str, str], str]:
        """Every fitted (kind, key) -> the value it uses: FP8, NVFP4, sustained."""
        return self.fp8 | self.fp4 | self.sixteen


def descent_keys(
    outcomes: list[Outcome],
    low_rows: list[Outcome],
    rows: FitRows,
    shared: float | None,
    shared_fp8: float | None,
    per_generation: bool,
) -> DescentKeys:
    """The `DescentKeys` of `fit_model`: one descent fits the sustained factor of each
    generation with dense 16-bit rows (the others hold ``shared``), the FP8 factor (per
    generation with dense FP8 rows when ``per_generation``, else one for all) and the NVFP4
    factor (per generation with NVFP4 rows when ``per_generation``, else one for all NVFP4
    rows). With ``per_generation`` a generation whose FP8 rows are all MoE rows holds the
    shared FP8 factor ``shared_fp8``, fitted on every dense FP8 row together (`_shared_fp8`),
    so that MoE residuals (the all-to-all overlap, the device time per token that
    docs/cost-model.md names) never set a GEMM rate alone; without dense FP8 rows at all,
    the MoE rows fit it as one factor."""
    fp8_gens = sorted({o.fit_key for o in low_rows if not is_fp4_key(o.fit_key)})
    fp4_gens = sorted({o.fit_key for o in low_rows if is_fp4_key(o.fit_key)})
    own = {(SUSTAINED, g): g for g in rows.sixteen}
    fixed = {
        (SUSTAINED, g): shared
        for g in {o.fit_key for o in outcomes} - set(rows.sixteen)
        if shared is not None
    }
    own_fp8 = fp8_gens
    if per_generation and shared_fp8 is not None:
        own_fp8 = [g for g in fp8_gens if g in rows.fp8]
        fixed |= {(FP8, g): shared_fp8 for g in fp8_gens if g not in own_fp8}
    return DescentKeys(
        fp8_gens=fp8_gens,
        fp4_gens=fp4_gens,
        own_fp8=own_fp8,
        fp8={(FP8, g): g if per_generation else "all" for g in own_fp8},
        fp4={(FP8, g): g if per_generation else FP4_SUFFIX for g in fp4_gens},
        sixteen=own,
        fixed=fixed,
    )


def fitted_model(
    rows: FitRows,
    low_rows: list[Outcome],
    grid: FitGrid,
    keys: DescentKeys,
    point: Point,
    moe: MoeTerms,
    *,
    fp8_factor: float | None,
    shared: float | None,
    shared_fp8: float | None,
    per_generation: bool,
) -> FittedModel:
    """The `FittedModel` of `fit_model`: a descent's ``point`` and ``moe`` values, the FP8
    factor ``fp8_factor`` shared by every generation, the shared sustained and FP8 factors
    (fitted first on the dense rows together) and the rows each value was fitted on; the
    per-generation FP8 factors only with ``per_generation`` and FP8 rows."""
    fp8_rows = [o for o in low_rows if not is_fp4_key(o.fit_key)]
    per_gen = per_generation and bool(keys.fp8_gens)
    host, expert, token = moe
    moe_ids = tuple(o.row_id for o in rows.moe)
    return FittedModel(
        fp8_factor=fp8_factor,
        fitted_on=dense_fp8_row_ids(rows)
        if per_gen and shared_fp8 is not None
        else tuple(o.row_id for o in fp8_rows),
        fp8_factors={g: point[FP8, g] for g in keys.fp8_gens} if per_gen else {},
        fp8_fitted_on=fp8_fitted_on(rows, fp8_rows, keys) if per_gen else {},
        moe_host_launch_s=grid.host_launch_s[0]
        if grid.host_launch_fixed
        else (host if rows.moe else 0.0),
        host_fitted_on=() if grid.host_launch_fixed else moe_ids,
        moe_expert_launch_s=expert_launch_s(grid, expert if rows.moe else 0.0),
        expert_fitted_on=()
        if grid.expert_launch_fixed or (grid.expert_launch_tied and grid.host_launch_fixed)
        else moe_ids,
        moe_token_device_s=grid.token_device_s[0]
        if grid.token_device_fixed
        else (token if rows.moe else 0.0),
        sustained_factor=shared,
        sustained_factors={g: point[SUSTAINED, g] for g in rows.sixteen},
        sustained_fitted_on=sixteen_fitted_on(rows),
        fp4_factors={g.removesuffix(FP4_SUFFIX): point[FP8, g] for g in keys.fp4_gens},
        fp4_fitted_on={
            g.removesuffix(FP4_SUFFIX): tuple(o.row_id for o in low_rows if o.fit_key == g)
            for g in keys.fp4_gens
        },
    )


def dense_fp8_row_ids(rows: FitRows) -> tuple[str, ...]:
    """Row ids of every dense FP8 row (not NVFP4), generation by generation: the rows of the
    shared FP8 factor."""
    return tuple(o.row_id for g, members in rows.fp8.items() if not is_fp4_key(g) for o in members)


def fp8_fitted_on(
    rows: FitRows, fp8_rows: list[Outcome], keys: DescentKeys
) -> dict[str, tuple[str, ...]]:
    """Per FP8 fit key, the row ids its factor was fitted on: its own FP8 rows (``fp8_rows``)
    where it fits a factor of its own, else every dense FP8 row (`dense_fp8_row_ids`)."""
    dense_fp8_ids = dense_fp8_row_ids(rows)
    return {
        g: tuple(o.row_id for o in fp8_rows if o.fit_key == g)
        if g in keys.own_fp8
        else dense_fp8_ids
        for g in keys.fp8_gens
    }


def sixteen_fitted_on(rows: FitRows) -> dict[str, tuple[str, ...]]:
    """Row ids of each generation's dense 16-bit rows, and under ``shared`` all of them (the
    rows of the shared sustained factor); empty without such rows."""
    sixteen_ids = {g: tuple(o.row_id for o in members) for g, members in rows.sixteen.items()}
    if sixteen_ids:
        sixteen_ids["shared"] = tuple(i for ids in sixteen_ids.values() for i in ids)
    return sixteen_ids


def expert_launch_s(grid: FitGrid, fitted: float) -> float:
    """The fit's per-expert launch time: the grid's one value when fixed, the Python-level
    one's fixed value when tied to it, else ``fitted``."""
    if grid.expert_launch_fixed:
        return grid.expert_launch_s[0]
    if grid.expert_launch_tied and grid.host_launch_fixed:
        return grid.host_launch_s[0]
    return fitted
