"""bench/zero3_apart.py: the DeepSpeed ZeRO-3 rows priced but reported apart, in no figure
and no Kendall group; their JSON key, text lines and section of the validation page."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import dev_rows, one_row_csv, synthetic_outcome

apart_mod = load_bench("zero3_apart")
zero3 = load_bench("zero3_recipes")
pricing = load_bench("row_pricing")
stats = load_bench("validation_stats")
bench = load_bench("validate_published")


def _apart(outcome, reason="engine apart"):
    return dataclasses.replace(outcome, apart_reason=reason)


def test_split_keeps_the_order_and_moves_only_rows_with_a_reason():
    a, b, c = (synthetic_outcome(i, "S", 1.0, 1.0) for i in "abc")
    figures, apart = apart_mod.split_apart([a, _apart(b), c])
    assert [o.row_id for o in figures] == ["a", "c"]
    assert [o.row_id for o in apart] == ["b"]


def _group(rows):
    """Outcomes of one strategy group (one source, model and cluster), one GPU count and
    plan per entry; (row id, GPUs, published s, predicted s, apart)."""
    return [
        (_apart if is_apart else (lambda o: o))(
            synthetic_outcome(row_id, "S", pub, pred, gpus=gpus, plan=f"plan {row_id}", gbs=8)
        )
        for row_id, gpus, pub, pred, is_apart in rows
    ]


def test_cross_pairs_count_only_pairs_of_an_apart_and_a_priced_strategy():
    """Published order: p1 (8 GPUs, 1 s) fastest per GPU, z1 (8 GPUs, 2 s), p2 (16 GPUs, 1.5
    s), z2 (16 GPUs, 4 s). Predicted: z1 faster than p1 (discordant), z1 faster than p2
    (concordant: 2 s on 8 GPUs beats 1.5 s on 16), z2 slower than both (concordant)."""
    outcomes = _group(
        [
            ("p1", 8, 1.0, 1.0, False),
            ("p2", 16, 1.5, 1.5, False),
            ("z1", 8, 2.0, 0.5, True),
            ("z2", 16, 4.0, 4.0, True),
        ]
    )
    figures, apart = apart_mod.split_apart(outcomes)
    every = apart_mod.cross_pairs_tau(figures, apart)
    assert every == {"tau": pytest.approx((3 - 1) / 4), "pairs": 4}
    same = apart_mod.cross_pairs_tau(figures, apart, same_gpus=True)
    assert same == {"tau": pytest.approx((1 - 1) / 2), "pairs": 2}
    # the pairs of two priced strategies belong to the figures, not to the cross pairs
    assert stats.kendall_tau(figures)["pairs"] == 1
    assert stats.kendall_tau(outcomes)["pairs"] == 6


def test_no_pair_gives_nan_and_the_text_says_so():
    figures = _group([("p1", 8, 1.0, 1.0, False)])
    apart = [_apart(synthetic_outcome("z", "OTHER", 1.0, 1.0))]
    tau = apart_mod.cross_pairs_tau(figures, apart)
    assert math.isnan(tau["tau"]) and tau["pairs"] == 0
    report = apart_mod.zero3_apart_report(figures, apart)
    assert "n/a over 0 pairs" in apart_mod.tau_sentence(report)


def test_sc21_table2_zero3_rows_are_apart_and_carry_reason_and_assumption():
    """Rows 11 (ZeRO-3, 384 GPUs) and 17 (PTD-P, 384 GPUs) of SC21 Table 2."""
    outcomes = [pricing.evaluate_row(r)[0] for r in dev_rows("11,17")]
    figures, apart = apart_mod.split_apart(outcomes)
    assert [o.row_id for o in figures] == ["17"] and [o.row_id for o in apart] == ["11"]
    assert apart[0].apart_reason == zero3.APART_REASON
    assert stats.kendall_tau(figures)["pairs"] == 0
    report = apart_mod.zero3_apart_report(figures, apart)
    (row,) = report["rows"]
    assert row["reason"] == zero3.APART_REASON
    assert "full recompute" in row["assumption"]
    assert row["error"] == pytest.approx(row["predicted_s"] / row["published_s"] - 1)
    assert report["kendall_tau"]["ptdp_vs_zero3"]["pairs"] == 1
    assert report["kendall_tau"]["pooled_if_included"]["pairs"] == 1
    assert report["kendall_tau"]["pooled_without"]["pairs"] == 0


def test_engine_costs_cite_deepspeed_v0_3_16_files_and_functions():
    costs = " ".join(zero3.UNPRICED_ENGINE_COSTS)
    for name in (
        "stage3.py",
        "_synchronize_communication",
        "partition_parameters.py",
        "_allgather_param",
        "fetch_sub_module",
        "_register_hooks_recursively",
        "create_reduce_and_remove_grad_hooks",
    ):
        assert name in costs


def test_the_section_renders_rows_costs_and_kendall_figures():
    outcomes = _group([("p1", 8, 1.0, 1.0, False), ("z1", 8, 2.0, 0.5, True)])
    report = apart_mod.zero3_apart_report(*apart_mod.split_apart(outcomes))
    lines = apart_mod.zero3_apart_lines(report)
    assert lines[1] == f"## {zero3.APART_TITLE}"
    assert "| z1 | m | plan z1 | 2.00 | 0.50 | -75.0% | 10.0 |" in lines
    assert "Why apart: engine apart." in lines
    assert f"Engine costs not priced ({zero3.ENGINE_SOURCE}):" in lines
    for cost in zero3.UNPRICED_ENGINE_COSTS:
        assert f"- {cost}." in lines
    assert lines[-1].startswith("Kendall tau of the PTD-P vs ZeRO-3 pairs")
    assert "-1.00 over 1 pairs" in lines[-1]
    assert apart_mod.zero3_apart_lines({"rows": []}) == []


def test_bench_json_keeps_zero3_rows_out_of_rows_and_groups(tmp_path, capsys):
    path = one_row_csv(tmp_path, "11,17")
    assert bench.main(["--no-fit", "--json", "--csv", str(path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [r["row_id"] for r in result["rows"]] == ["17"]
    assert result["num_rows"] == 1 and result["strategy_pairs"] == 0
    assert [r["row_id"] for r in result["priced_apart"]["rows"]] == ["11"]
    assert result["priced_apart"]["title"] == zero3.APART_TITLE
    assert bench.main(["--no-fit", "--csv", str(path)]) == 0
    out = capsys.readouterr().out
    assert "priced apart: row 11 GPT 174.6B" in out
    assert "Kendall tau of the PTD-P vs ZeRO-3 pairs" in out


def test_the_page_tables_hold_the_section_after_the_rows(tmp_path, capsys):
    """`validation_tables.result_tables` of the bench's JSON (its out-of-sample groupings
    stood in by the in-sample ones) carries the section between the row table and the
    rows not expressible."""
    path = one_row_csv(tmp_path, "11,17")
    assert bench.main(["--no-fit", "--json", "--csv", str(path)]) == 0
    result = json.loads(capsys.readouterr().out)
    tables = load_bench("validation_tables")
    result["loso"] = {k: v for k, v in result.items() if k.startswith("by_")}
    result["memory_case_llama3_8b_h100"] = load_bench("validation_report").llama3_8b_memory_case()
    lines = tables.result_tables(result)
    heading = lines.index(f"## {zero3.APART_TITLE}")
    assert lines.index("## Rows not expressible yet") > heading
    assert any(line.startswith("| 11 | GPT 174.6B |") for line in lines[heading:])
