"""bench/row_figures.py: a row's case priced as the validation prices it (`case_estimate`,
`row_estimate`, `published_case`, `priced_row`), on row 38 of ``published-runs-dev.csv``
(Megatron-LM README 2024, GPT 1.7B on 48 H100, tp1 pp1, 408.8 TFLOP/s per GPU)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.estimate import estimate_plan
from profiles.store import load_profile
from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import dev_rows

figures = load_bench("row_figures")

FIGURE_COLUMNS = (
    "iteration_time_s",
    "tokens_per_sec_per_gpu",
    "derived_tokens_per_sec_per_gpu",
    "tflops_per_gpu",
    "aggregate_pflops",
)
"""The columns `published_iteration_time_s` reads a published figure from."""


@pytest.fixture(scope="module")
def raw() -> dict[str, str]:
    return dev_rows("38")[0]


def test_priced_row_is_the_case_its_estimate_and_its_published_seconds(raw):
    case, est, published_s = figures.priced_row(raw)
    assert published_s == figures.published_iteration_time_s(raw, case)
    direct = estimate_plan(
        case.model, case.cluster, case.job, case.plan, load_profile(case.profile),
        options=case.options,
    )  # fmt: skip
    assert est.iteration_time_s == direct.iteration_time_s
    assert est.peak_memory_bytes == direct.peak_memory_bytes


def test_case_estimate_prices_each_replacement_in_place_of_the_rows(raw):
    case, published_s = figures.published_case(raw)
    base = figures.case_estimate(case)
    profile = load_profile(case.profile)
    assert figures.case_estimate(case, profile=profile).iteration_time_s == base.iteration_time_s
    plan = dataclasses.replace(case.plan, micro_batch_size=2)
    replaced = figures.case_estimate(case, plan=plan)
    assert (
        replaced.iteration_time_s
        == estimate_plan(
            case.model, case.cluster, case.job, plan, profile, options=case.options
        ).iteration_time_s
    )
    assert replaced.peak_memory_bytes > base.peak_memory_bytes
    slower = dataclasses.replace(case.options, sustained_gemm_rate_factor=0.5)
    assert figures.case_estimate(case, options=slower).iteration_time_s > base.iteration_time_s
    half = dataclasses.replace(case.model, num_layers=case.model.num_layers // 2)
    assert figures.case_estimate(case, model=half).iteration_time_s < base.iteration_time_s
    assert published_s > 0


def test_a_row_without_a_figure_is_estimated_but_not_priced(raw):
    bare = raw | dict.fromkeys(FIGURE_COLUMNS, "")
    with pytest.raises(figures.NotExpressible, match="no iteration time"):
        figures.published_case(bare)
    with pytest.raises(figures.NotExpressible):
        figures.priced_row(bare)
    case, est = figures.row_estimate(bare)
    assert case.plan == figures.priced_row(raw)[0].plan
    assert est.iteration_time_s == figures.case_estimate(case).iteration_time_s


def test_an_aggregate_figure_alone_reads_as_tflops_per_gpu(raw):
    # Row 38 prints 408.8 TFLOP/s per GPU and 19.6 PFLOP/s over its GPUs.
    gpus = int(raw["num_gpus"])
    aggregate = raw | {"tflops_per_gpu": "", "aggregate_pflops": "19.6"}
    per_gpu = raw | {"tflops_per_gpu": str(19.6e3 / gpus), "aggregate_pflops": ""}
    assert figures.published_case(aggregate)[1] == pytest.approx(
        figures.published_case(per_gpu)[1], rel=1e-12
    )
