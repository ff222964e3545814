"""The optimizer of a published row (`bench/optimizer_recipes.py`): Megatron-Bridge's
Kimi-K2 rows run layer-wise distributed Muon without the distributed optimizer, every other
row Adam as before."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench

optimizers = load_bench("optimizer_recipes")
rows_mod = load_bench("published_rows")
validate = load_bench("validate_published")
KIMI = {"source_id": "MBRIDGE-26.04", "model": "Kimi_K2", "gpu_type": "GB300 (NVL72)"}


@pytest.mark.parametrize("release", ["26.02.01", "26.04", "26.04.01", "26.06", "26.08"])
def test_kimi_k2_releases_run_dist_muon(release: str) -> None:
    raw = KIMI | {"source_id": f"MBRIDGE-{release}"}
    assert optimizers.row_optimizer(raw) == "dist_muon"
    assert optimizers.optimizer_plan_fields(raw) == {
        "distributed_optimizer": False,
        "overlap_param_gather": False,
    }


@pytest.mark.parametrize(
    "raw",
    [
        KIMI | {"source_id": "MBRIDGE-25.11"},  # no Kimi-K2 performance config before v0.3.1
        KIMI | {"source_id": "MOEZOO-KIMI"},
        {"source_id": "MBRIDGE-26.04", "model": "DeepSeekV3", "gpu_type": "H100"},
    ],
)
def test_other_rows_run_adam(raw: dict[str, str]) -> None:
    assert optimizers.row_optimizer(raw) == "adam"
    assert optimizers.optimizer_plan_fields(raw) == {}


def test_dev_set_kimi_rows_are_priced_with_dist_muon() -> None:
    path = validate.default_csv()
    if path is None:
        pytest.skip("published-runs-dev.csv not found")
    rows = [r for r in validate.read_rows(path) if r["model"].lower().startswith("kimi")]
    assert rows
    for raw in rows:
        case = rows_mod.case_for_row(raw)
        assert case.job.optimizer == "dist_muon"
        assert not case.plan.distributed_optimizer and not case.plan.overlap_param_gather
