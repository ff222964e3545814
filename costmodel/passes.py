"""What the runtimes hand the event loop: the cost of a pass, of a model chunk per
microbatch, and of a stage's work after the pipeline.

A runtime (`costmodel.runtime.RuntimeModel`) prices a plan into these records; the event
loop (`costmodel.iteration`) times the schedule with them and sums the iteration. Seconds
throughout; bytes where a field says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from costmodel.topology import AMAX_AXES, GroupPlacement, PlanPlacements, single_rank_placement


@dataclass(frozen=True, kw_only=True, slots=True)
class PassCost:
    """Time of one pass (forward, backward or recompute) of some work on one rank."""

    compute_s: float = 0.0
    """Kernels on the compute stream."""
    tp_s: float = 0.0
    """Tensor-parallel collectives, total (hidden or not)."""
    tp_exposed_s: float = 0.0
    """Part of tp_s the compute stream waits for."""
    tp_bytes: float = 0.0
    """Bytes the TP collectives carry (nccl-tests sizes, summed)."""
    cp_s: float = 0.0
    """Context-parallel K/V exchange, total."""
    cp_exposed_s: float = 0.0
    """Part of cp_s not hidden under attention."""
    cp_bytes: float = 0.0
    """Bytes the CP exchange carries."""
    ep_s: float = 0.0
    """Expert-parallel all-to-all (and expert-TP gathers), total."""
    ep_exposed_s: float = 0.0
    """Part of ep_s the compute stream waits for (all of it)."""
    ep_bytes: float = 0.0
    """Bytes the EP collectives carry."""

    @property
    def exposed_comm_s(self) -> float:
        """Communication the compute stream waits for."""
        return self.tp_exposed_s + self.cp_exposed_s + self.ep_exposed_s

    @property
    def duration_s(self) -> float:
        """Wall time on the compute stream: compute plus exposed communication."""
        return self.compute_s + self.exposed_comm_s

    def plus(self, other: PassCost) -> PassCost:
        """Field-wise sum."""
        return PassCost(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in _F})

    def scaled(self, factor: float) -> PassCost:
        """Every field times ``factor`` (e.g. a layer repeated over a chunk)."""
        return PassCost(**{f.name: getattr(self, f.name) * factor for f in _F})


_F = fields(PassCost)
ZERO = PassCost()


@dataclass(frozen=True, kw_only=True, slots=True)
class CommGroups:
    """Placements of the groups a layer talks over (one rank per group is enough)."""

    tp: GroupPlacement = field(default_factory=lambda: single_rank_placement("tp"))
    """Tensor-parallel group."""
    cp: GroupPlacement = field(default_factory=lambda: single_rank_placement("cp"))
    """Context-parallel group."""
    ep: GroupPlacement = field(default_factory=lambda: single_rank_placement("ep"))
    """Expert-parallel group."""
    etp: GroupPlacement = field(default_factory=lambda: single_rank_placement("etp"))
    """Expert tensor-parallel group."""
    tp_dp_cp: GroupPlacement = field(default_factory=lambda: single_rank_placement(AMAX_AXES))
    """One stage's TP x DP x CP group: delayed scaling's amax all-reduce
    (`costmodel.topology.AMAX_AXES`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ChunkCost:
    """One model chunk of one stage, one microbatch."""

    forward: PassCost
    """Forward pass of the chunk's layers (with embedding / output layer where held)."""
    backward: PassCost
    """Backward pass, without recompute."""
    recompute: PassCost
    """Forward work rerun before the backward."""
    dense_params: float
    """Parameters on one rank reduced over DP x CP."""
    expert_params: float
    """Routed-expert parameters on one rank reduced over expert DP."""

    @property
    def backward_with_recompute(self) -> PassCost:
        """What a backward action runs: recompute, then the backward."""
        return self.recompute.plus(self.backward)


@dataclass(frozen=True, kw_only=True, slots=True)
class StageTail:
    """Per-stage work after the pipeline."""

    pipeline_end_s: float
    """End of the stage's last backward."""
    grads_done_s: float
    """End of gradient reduction, embedding and norm all-reduces."""
    norm_allreduce_s: float
    """SP norm-gradient all-reduce over TP (part of grads_done_s)."""
    optimizer_s: float
    """Optimizer step on the rank's shard."""
    param_gather_s: float
    """Exposed parameter all-gather."""
    dp_events: tuple[tuple[str, float, float, float], ...]
    """(name, start, duration, bytes) of each gradient collective, for the timeline."""


def comm_groups(placements: PlanPlacements) -> CommGroups:
    """The layer-level groups of a plan's placements."""
    return CommGroups(
        tp=placements["tp"],
        cp=placements["cp"],
        ep=placements["ep"],
        etp=placements["etp"],
        tp_dp_cp=placements[AMAX_AXES],
    )
