"""Rank layout: each rank's coordinates and the ranks of every parallel group, as a pure
function of the parallel degrees (no torch.distributed, so it is testable anywhere).

Megatron's order ``tp-cp-ep-dp-pp`` (`RankGenerator`, megatron-facts.md §4.2): the
leftmost axis varies fastest. Two grids share the world:

- dense layers (attention, dense MLP) use ``(tp, cp, dp, pp)`` with ep = 1:
  ``rank = tp_i + tp·(cp_i + cp·(dp_i + dp·pp_i))``;
- expert layers use ``(etp, ep, edp, pp)`` with no cp:
  ``rank = etp_i + etp·(ep_i + ep·(edp_i + edp·pp_i))``, where
  ``edp = world / (etp·ep·pp)``.

Both grids end in the same pp axis of the same size, so the pipeline groups agree. A group
over some axes is the set of ranks that differ only in those axes' indices; it is built the
nanotron way, by viewing ``range(world)`` as a mixed-radix grid: the offsets spanned by the
chosen axes are added to every base spanned by the other axes.

Worked example (world 8; tp = 2, cp = 1, dp = 2, pp = 2; experts ep = 4, etp = 1, so
edp = 8 / (1·4·2) = 1)::

    rank    0  1  2  3  4  5  6  7
    tp_i    0  1  0  1  0  1  0  1     stride 1
    dp_i    0  0  1  1  0  0  1  1     stride tp = 2
    pp_i    0  0  0  0  1  1  1  1     stride tp·cp·dp = 4
    ep_i    0  1  2  3  0  1  2  3     stride etp = 1 (ep folds over the tp and dp ranks)

    groups("tp")    = (0, 1), (2, 3), (4, 5), (6, 7)
    groups("dp")    = (0, 2), (1, 3), (4, 6), (5, 7)
    groups("pp")    = (0, 4), (1, 5), (2, 6), (3, 7)
    groups("tp-dp") = (0, 1, 2, 3), (4, 5, 6, 7)
    groups("ep")    = (0, 1, 2, 3), (4, 5, 6, 7)
    groups("edp")   = (0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,)

Axes are named by joining axis names of one grid with ``-`` in any order (``"dp-cp"`` and
``"cp-dp"`` are the same group). Groups come sorted by their first rank, ranks ascending
inside a group; that is also Megatron's order.
"""

from __future__ import annotations

from dataclasses import dataclass

from specs.errors import SpecError
from specs.fieldcheck import require_positive
from specs.plan import ParallelPlan

DENSE_AXES = ("tp", "cp", "dp", "pp")
"""Axes of the dense grid, fastest first."""
EXPERT_AXES = ("etp", "ep", "edp", "pp")
"""Axes of the expert grid, fastest first."""

Grid = list[tuple[str, int, int]]
"""A grid as (axis name, size, stride) triples, fastest axis first."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RankCoordinates:
    """Where one rank sits in the dense and the expert grid."""

    rank: int
    """Global rank, 0 <= rank < world size."""
    tp: int
    """Index in its tensor-parallel group."""
    cp: int
    """Index in its context-parallel group."""
    dp: int
    """Index in its data-parallel group."""
    pp: int
    """Pipeline stage (the same in both grids)."""
    etp: int
    """Index in its expert-tensor-parallel group."""
    ep: int
    """Expert-parallel index: which slice of the experts this rank holds."""
    edp: int
    """Index in its expert-data-parallel group."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RankLayout:
    """The parallel degrees that place ranks on the dense and the expert grid."""

    tp: int = 1
    """Tensor-parallel size."""
    cp: int = 1
    """Context-parallel size."""
    dp: int = 1
    """Data-parallel size."""
    pp: int = 1
    """Pipeline-parallel size."""
    etp: int = 1
    """Tensor-parallel size inside experts (already resolved; a plan's None means tp)."""
    ep: int = 1
    """Expert-parallel size."""

    def __post_init__(self) -> None:
        require_positive(self, "tp", "cp", "dp", "pp", "etp", "ep")
        stage = self.tp * self.cp * self.dp
        if stage % (self.etp * self.ep):
            raise SpecError(
                f"expert grid does not tile the world: etp ({self.etp}) · ep ({self.ep}) = "
                f"{self.etp * self.ep} must divide tp ({self.tp}) · cp ({self.cp}) · "
                f"dp ({self.dp}) = {stage}, the ranks of one pipeline stage"
            )

    @classmethod
    def from_plan(cls, plan: ParallelPlan, world_size: int | None = None) -> RankLayout:
        """The layout of a plan; with ``world_size`` (the cluster's GPU count) the plan's
        tp·cp·dp·pp must equal it. Raises `SpecError` when the degrees do not tile."""
        if world_size is not None and plan.world_size != world_size:
            raise SpecError(
                f"degrees do not tile the world: tp ({plan.tp}) · cp ({plan.cp}) · "
                f"dp ({plan.dp}) · pp ({plan.pp}) = {plan.world_size} must equal world_size "
                f"({world_size})"
            )
        return cls(tp=plan.tp, cp=plan.cp, dp=plan.dp, pp=plan.pp, etp=plan.expert_tp, ep=plan.ep)

    # ---- sizes ---------------------------------------------------------------------

    @property
    def world_size(self) -> int:
        """tp·cp·dp·pp ranks."""
        return self.tp * self.cp * self.dp * self.pp

    @property
    def edp(self) -> int:
        """Expert-data-parallel size: world / (etp·ep·pp)."""
        return self.world_size // (self.etp * self.ep * self.pp)

    def _grid(self, axes: str) -> tuple[Grid, frozenset[str]]:
        """The grid that owns ``axes``, and the chosen axis names."""
        names = axes.split("-")
        chosen = frozenset(names)
        if "" in chosen or len(chosen) != len(names):
            raise SpecError(_axes_message(axes))
        if chosen <= set(DENSE_AXES):
            return _strided(DENSE_AXES, (self.tp, self.cp, self.dp, self.pp)), chosen
        if chosen <= set(EXPERT_AXES):
            return _strided(EXPERT_AXES, (self.etp, self.ep, self.edp, self.pp)), chosen
        raise SpecError(_axes_message(axes))

    def group_size(self, axes: str) -> int:
        """Ranks in each group over ``axes`` (the product of their sizes)."""
        grid, chosen = self._grid(axes)
        size = 1
        for name, axis_size, _ in grid:
            if name in chosen:
                size *= axis_size
        return size

    # ---- rank -> coordinates and groups ------------------------------------------------

    def coordinates(self, rank: int) -> RankCoordinates:
        """The rank's index on every axis of both grids."""
        self._check_rank(rank)
        dense, _ = self._grid("-".join(DENSE_AXES))
        expert, _ = self._grid("-".join(EXPERT_AXES))
        return RankCoordinates(rank=rank, **(_digits(rank, expert) | _digits(rank, dense)))

    def groups(self, axes: str) -> tuple[tuple[int, ...], ...]:
        """Every group over ``axes``; together they partition ``range(world_size)``."""
        grid, chosen = self._grid(axes)
        offsets = _span([(size, stride) for name, size, stride in grid if name in chosen])
        bases = _span([(size, stride) for name, size, stride in grid if name not in chosen])
        return tuple(tuple(base + off for off in offsets) for base in bases)

    def group_of(self, rank: int, axes: str) -> tuple[int, ...]:
        """The group over ``axes`` that contains ``rank``."""
        self._check_rank(rank)
        grid, chosen = self._grid(axes)
        digits = _digits(rank, grid)
        base = rank - sum(digits[name] * stride for name, _, stride in grid if name in chosen)
        offsets = _span([(size, stride) for name, size, stride in grid if name in chosen])
        return tuple(base + off for off in offsets)

    def _check_rank(self, rank: int) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.world_size:
            raise SpecError(
                f"rank must be an integer in [0, {self.world_size}) for world_size "
                f"{self.world_size}, got {rank!r}"
            )


def _strided(names: tuple[str, ...], sizes: tuple[int, ...]) -> Grid:
    """Attach to each axis its stride: the product of the sizes of the faster axes."""
    grid, stride = [], 1
    for name, size in zip(names, sizes, strict=True):
        grid.append((name, size, stride))
        stride *= size
    return grid


def _digits(rank: int, grid: Grid) -> dict[str, int]:
    """The rank's index on each axis of the grid (mixed-radix digits)."""
    return {name: rank // stride % size for name, size, stride in grid}


def _span(dims: list[tuple[int, int]]) -> list[int]:
    """All sums of ``index·stride`` over the given (size, stride) axes, ascending."""
    values = [0]
    for size, stride in dims:
        values = [v + i * stride for i in range(size) for v in values]
    return sorted(values)


def _axes_message(axes: str) -> str:
    return (
        f"unknown axes {axes!r}: join distinct axis names of one grid with '-', dense "
        f"{{{', '.join(DENSE_AXES)}}} or expert {{{', '.join(EXPERT_AXES)}}}; e.g. 'tp', "
        "'dp-cp', 'tp-dp-cp', 'tp-pp', 'ep', 'etp-ep', 'edp'"
    )
