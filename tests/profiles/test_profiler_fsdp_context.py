"""The FSDP2 gathers in context (`profiles.profiler.fsdp_context`) on two gloo ranks."""

from __future__ import annotations

import dataclasses

import pytest
import torch.distributed as dist

from costmodel.runtimes.torch import fsdp_rates as model
from profiles.profiler import fsdp_context as probe
from profiles.profiler.run import _max_agree
from tests.executor.spawn_utils import run_world
from tests.profiles.profiler_in_context import check_records
from tests.profiles.test_profiler_framework import RUN


def test_the_cost_model_reads_the_probe_at_its_size_and_levels():
    assert model.PROBE_GATHER_BYTES == probe.GATHER_BYTES
    assert model.PROBE_TENSORS == probe.TENSORS
    assert len(probe.LEVELS) == model.LEVELS


def _probe_rank(rank: int, save) -> None:
    run = dataclasses.replace(RUN, agree=_max_agree(dist.group.WORLD))
    save({r.op: r.times_s for r in probe.time_fsdp_context(run)})


@pytest.mark.slow
def test_the_gathers_are_timed_in_their_chain_at_two_levels_of_host_work():
    assert probe.time_fsdp_context(RUN) == ()  # no process group: nothing to time
    results, error = run_world(2, _probe_rank)
    assert error is None, error[-2500:]
    for found in results:
        check_records(found, "fsdp_context", "fsdp_layer")
