"""Shared inputs of the executor-model tests: the synthetic CPU profile
(`tests.costmodel.cpu_fixture.cpu_profile`), its host rates, the ``tiny`` and ``tiny-moe``
presets, a job of 128-token sequences, a rank's shape, a count of collectives by kind, a
cluster of CPU ranks, and a plan's simulated step and chunk costs under the ``torch``
runtime."""

from __future__ import annotations

from collections.abc import Iterable

from costmodel.execution_presets import TORCH_OPTIONS
from costmodel.iteration import IterationSimulation, simulate_iteration
from costmodel.passes import ChunkCost, comm_groups
from costmodel.runtimes.registry import runtime_model
from costmodel.runtimes.torch.ops import Comm
from costmodel.runtimes.torch.pricing import executor_chunk_costs
from costmodel.runtimes.torch.rates import host_rates
from costmodel.runtimes.torch.shapes import RankShape, rank_shape
from costmodel.scale_up import RankPacking
from costmodel.topology import plan_placements
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.cpu_fixture import cpu_profile

CPU = cpu_profile()
RATES = host_rates(CPU)
TINY = get_preset("tiny")
MOE = get_preset("tiny-moe")
JOB = TrainingJob(seq_length=128, global_batch_size=8, precision="fp32")
FOUR_PER_NODE = RankPacking(gpus_per_node=4)
"""Four ranks to a node, as `cluster` places them."""


def shape(**plan: object) -> RankShape:
    """The `RankShape` of ``ParallelPlan(**plan)`` at 128 tokens per sequence, 8 microbatches."""
    return rank_shape(ParallelPlan(**plan), 128, 8)


def count(comms: Iterable[Comm], op: str) -> float:
    """How many collectives of kind ``op`` ``comms`` holds (each weighted by its count)."""
    return sum(c.count for c in comms if c.op == op)


def cluster(n: int) -> ClusterSpec:
    """``n`` ranks of the CPU fixture, four to a node."""
    return ClusterSpec(hardware="cpu-test", num_gpus=n, gpus_per_node=4)


def sim(
    plan: ParallelPlan,
    model: ModelSpec = TINY,
    job: TrainingJob = JOB,
    profile: HardwareProfile = CPU,
) -> IterationSimulation:
    """The ``torch`` runtime's simulated step of ``plan`` on ``profile`` (the CPU fixture
    unless given), four ranks to a node."""
    return simulate_iteration(
        model, job, plan, profile, packing=FOUR_PER_NODE, runtime=runtime_model(TORCH_OPTIONS)
    )


def chunks(plan: ParallelPlan, model: ModelSpec = TINY) -> tuple[tuple[ChunkCost, ...], ...]:
    """The executor's chunk costs of ``plan`` on the CPU fixture, per stage and chunk."""
    placements = plan_placements(CPU, plan, FOUR_PER_NODE)
    return executor_chunk_costs(model, JOB, plan, CPU, comm_groups(placements), placements)
