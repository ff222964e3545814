"""The MoE exchange probe (`profiles.profiler.moe_exchange`) on two gloo ranks."""

from __future__ import annotations

import dataclasses

import pytest
import torch.distributed as dist

from costmodel.runtimes.torch import moe_exchange_rates as model
from profiles.profiler import in_context
from profiles.profiler import moe_exchange as probe
from profiles.profiler.run import _max_agree
from tests.executor.spawn_utils import run_world
from tests.profiles.profiler_in_context import check_records
from tests.profiles.test_profiler_framework import RUN


def test_the_cost_model_reads_the_probe_at_its_size_and_levels():
    assert model.PROBE_TOKEN_BYTES == probe.TOKEN_BYTES
    assert len(probe.LEVELS) == model.LEVELS
    assert model.PASSES == in_context.PASSES


def _probe_rank(rank: int, save) -> None:
    records = probe.time_moe_exchange(dataclasses.replace(RUN, agree=_max_agree(dist.group.WORLD)))
    save({r.op: r.times_s for r in records})


@pytest.mark.slow
def test_the_exchange_is_timed_in_its_layer_at_two_levels_of_host_work():
    assert probe.time_moe_exchange(RUN) == ()  # no process group: nothing to time
    results, error = run_world(2, _probe_rank)
    assert error is None, error[-2500:]
    for found in results:
        check_records(found, "moe_exchange", "moe_layer")
