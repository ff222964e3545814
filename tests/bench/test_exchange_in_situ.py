"""The in-situ exchange bench (`bench/exchange_in_situ.py`, loaded by path): its local
stand-ins keep the shapes the executor's exchanges produce."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from executor.context_parallel import _gather_sequence
from tests.bench.bench_loader import load_bench
from tests.executor.spawn_utils import run_world


def _load():
    return load_bench("exchange_in_situ")


def _gathers(rank: int, save) -> None:
    bench = _load()
    x = torch.randn(1, 2, 8, 4)  # (B, G, S, K)
    real, local = _gather_sequence(x, dist.group.WORLD), bench._local_gather(x, dist.group.WORLD)
    save((tuple(real.shape), tuple(local.shape), bool(torch.equal(local[:, :, :8], x))))


@pytest.mark.slow
def test_the_local_gather_has_the_real_gathers_shape():
    results, error = run_world(2, _gathers)
    assert error is None, error[-2000:]
    for real, local, own_first in results:
        assert real == local == (1, 2, 16, 4)
        assert own_first


def test_the_local_token_exchange_returns_the_rows_the_counts_announce():
    bench = _load()
    x = torch.arange(12.0).view(6, 2)
    out = bench._local_all_to_all(x, [2, 3], [4, 2], None)
    assert out.shape == (5, 2) and torch.equal(out, x[:5])
    counts, received = torch.tensor([[1, 2], [3, 4]]), torch.empty(2, 2, dtype=torch.int64)
    bench._LocalCounts().all_to_all_single(received, counts)
    assert torch.equal(received, counts)
    # everything else is torch.distributed's own
    assert bench._LocalCounts().get_world_size is dist.get_world_size


def test_every_case_names_a_lane_the_model_reports():
    bench = _load()
    for model, plan, local, lane, real in bench.CASES.values():
        assert model in ("tiny", "tiny-moe")
        assert lane in ("cp", "ep") and callable(local)
        assert real is None or callable(real)
        assert getattr(plan, lane) == 2


def test_balanced_routing_keeps_the_rows_and_splits_them_evenly():
    bench = _load()
    even = bench.even_counts(torch.tensor([21, 30, 30, 35, 36, 37, 34, 33]), 256)
    assert even.tolist() == [32] * 8
    uneven = bench.even_counts(torch.tensor([0, 5, 0, 0]), 6)
    assert uneven.tolist() == [2, 2, 1, 1] and uneven.dtype == torch.int64
