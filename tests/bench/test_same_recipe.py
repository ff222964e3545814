"""bench/same_recipe.py: published tokens/s per GPU ratios of identical recipes."""

from __future__ import annotations

import csv
import io

import pytest

from tests.bench.bench_loader import load_bench

same = load_bench("same_recipe")

HEADER = ("row_id", "gpu_type", "tokens_per_sec_per_gpu", *same.RECIPE_COLUMNS)


def _csv(lines):
    text = "\n".join([",".join(HEADER), *lines])
    return list(csv.DictReader(io.StringIO(text)))


def _line(row_id, gpu, rate, model="M", tp="1", gbs="512", source="MB-1"):
    recipe = dict.fromkeys(same.RECIPE_COLUMNS, "")
    recipe |= {"source_id": source, "model": model, "tp": tp, "global_batch_size": gbs}
    return ",".join([row_id, gpu, rate, *recipe.values()])


ROWS = _csv(
    [
        _line("1", "GB300 (NVL72)", "1200"),
        _line("2", "GB200 (NVL72)", "1000"),
        _line("3", "GB300 (NVL72)", "1300", model="N"),
        _line("4", "GB200 (NVL72)", "1000", model="N"),
        _line("5", "B300", "1100", model="N"),
        _line("6", "B200", "1000", model="N"),
        _line("7", "B300", "990", model="N"),  # repeat of row 5: averaged
        _line("8", "B200", "900", tp="2"),  # another plan: no partner
        _line("9", "GB200 (NVL72)", "", model="N", source="MB-2"),  # no rate printed
        _line("10", "GB300 (NVL72)", "1500", model="N", source="MB-2"),
    ]
)


def test_ratios_pair_only_identical_recipes():
    ratios = same.same_recipe_ratios(ROWS)
    assert set(ratios) == {"GB300/GB200", "B300/B200", "GB300/B300", "GB200/B200"}
    ultra = ratios["GB300/GB200"]
    assert ultra["pairs"] == 2
    assert ultra["median"] == pytest.approx((1.2 + 1.3) / 2)
    assert (ultra["min"], ultra["max"]) == pytest.approx((1.2, 1.3))
    assert ratios["B300/B200"]["pairs"] == 1
    assert ratios["B300/B200"]["median"] == pytest.approx(1045 / 1000)
    assert ratios["B300/B200"]["rows"] == [[["5", "7"], ["6"], pytest.approx(1.045)]]
    assert ratios["GB300/B300"]["median"] == pytest.approx(1300 / 1045)


def test_pairs_without_a_shared_recipe_are_left_out():
    ratios = same.same_recipe_ratios(ROWS[:2])
    assert list(ratios) == ["GB300/GB200"]
    assert same.same_recipe_ratios(ROWS[7:9]) == {}


def test_predicted_ratio_is_the_inverse_time_ratio_over_priced_pairs():
    ratios = same.same_recipe_ratios(ROWS)
    predicted = {"1": 1.0, "2": 1.1, "3": 2.0, "5": 2.0, "7": 2.0, "6": 2.4}
    result = same.with_predictions(ratios, predicted)
    ultra = result["GB300/GB200"]
    assert ultra["predicted_pairs"] == 1  # row 4 was not priced
    assert ultra["predicted_median"] == pytest.approx(1.1)
    assert ultra["median"] == ratios["GB300/GB200"]["median"]
    assert result["B300/B200"]["predicted_median"] == pytest.approx(1.2)
    assert same.with_predictions(ratios, {})["GB200/B200"]["predicted_median"] is None
