"""The inputs of `executor.run.execute`: the run's configuration (`RunConfig`) and what a
rank's engine builder returns (`RankSetup`, `Setup`, `Trainer`).

They live apart from the training loop so that the modules the loop uses (the checks before
launch, `executor.preflight`; the run folder, `executor.run_folder`) can name them without
importing the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from executor.launch import RankInfo
from specs.bundle import PlanBundle


class Trainer(Protocol):
    """What the loop needs from an engine."""

    optimizer: torch.optim.Optimizer

    def train_step(self, tokens: torch.Tensor) -> Any:
        """One optimizer step on this data-parallel rank's tokens; returns an object with a
        ``loss`` (the global-batch mean, equal on every rank)."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class RankSetup:
    """One rank's engine and the facts the loop needs about its place in the plan."""

    trainer: Trainer
    """The engine."""
    parts: Mapping[str, nn.Module]
    """Model parts by a name that means the same weights in every run of the plan
    (``stage{i}``, the virtual pipeline stage), for checkpoints."""
    dp_rank: int
    """Data-parallel index: which slice of the global batch this rank reads."""
    dp_size: int
    """Data-parallel size."""
    group_labels: Mapping[str, Sequence[str]]
    """Process group name -> axis labels (``tp``, ``dp-cp``;
    `executor.trace_collectives.group_labels`), for the measurement."""
    context_parallel: bool = False
    """True when cp > 1 (point-to-point inside compute is then CP traffic)."""
    local_keys: Callable[[str], bool] | None = None
    """State-dict keys whose tensors differ between ranks of one name (see
    `executor.checkpoint.save_checkpoint`)."""
    local_tag: str = ""
    """This rank's tag for ``local_keys`` entries, e.g. ``ep1``."""


Setup = Callable[[PlanBundle, RankInfo, int], RankSetup]
"""Builds a rank's engine from (bundle, rank info, seed); must be a module-level function."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunConfig:
    """Everything `execute` needs."""

    bundle: PlanBundle
    """Model, cluster, job and plan."""
    out_dir: str
    """Run folder to write."""
    steps: int = 10
    """Measured steps."""
    warmup: int = 2
    """Unmeasured steps before them."""
    data: str | None = None
    """`--data`: a text file, a Megatron dataset prefix, or None for synthetic tokens."""
    seed: int = 0
    """Seed of the weights and of the synthetic stream."""
    save_dir: str | None = None
    """Folder of the checkpoints (``step_<n>`` inside), one written after the last step;
    None to skip."""
    save_interval: int | None = None
    """Also save a checkpoint whenever this many steps (warmup included) have run since
    step 0; None: only after the last step."""
    keep: int | None = None
    """Complete checkpoints kept in ``save_dir`` (the newest); None keeps all."""
    resume_dir: str | None = None
    """Checkpoint to continue from: a checkpoint folder, or a ``save_dir`` whose newest
    complete checkpoint is taken; None to start at step 0."""
    peak_flops_per_rank: float | None = None
    """Peak FLOP/s of one rank's device, for MFU; None leaves MFU null."""
    model_flops_per_iteration: float | None = None
    """Model FLOPs of one iteration over the whole job (the caller computes them)."""
    timeout_s: float = 60.0
    """Process-group timeout: a collective waiting longer than this raises."""
    profile_steps: int = 2
    """Measured steps (the last ones) run under the trace profiler."""
    setup: Setup | None = None
    """Engine builder; None means `executor.run.engine_setup`."""
    host_probe: Callable[[], Callable[[], None]] | None = None
    """Builder of a fixed piece of host work (`profiles.host_probe.host_probe`; a
    module-level function, so it travels to spawned ranks). When set, every rank times
    `executor.run.PROBE_CALLS` calls of it after each unprofiled step (outside the step's
    clock) and the ranks meet at a barrier, so the next step starts together: how fast the
    host ran during the run (``metrics.json`` ``host_probe_s``); None: no probe."""
