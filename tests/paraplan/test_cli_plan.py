"""The `plan` and `export` subcommands, run through parsers built from their own
`add_arguments` (the command registry is the lead's): JSON keys, files written, exit codes,
the sizing form and the exports of a written plan.json."""

from __future__ import annotations

import argparse
import json
import tomllib

import pandas as pd
import pytest

from costmodel.estimate import JSON_KEYS
from paraplan.commands import export as export_command
from paraplan.commands import plan as plan_command
from paraplan.knob_args import space_from_args
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.serde import dumps, load

BASE = ["--model", "tiny", "--hardware", "h100-sxm-80gb", "--seq-len", "512", "--global-batch", "8"]
# Fixing a few switches keeps each search to a few hundred candidates.
FEW = ["--no-overlap-param-gather", "--no-tp-comm-overlap", "--bucket-size", "0", "--max-mbs", "2"]


def run_plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    plan_command.add_arguments(parser)
    code = plan_command.run(parser.parse_args(list(argv)))
    return code, capsys.readouterr().out


def run_export(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    export_command.add_arguments(parser)
    code = export_command.run(parser.parse_args(list(argv)))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_plan_json_keys(capsys) -> None:
    code, out = run_plan(capsys, *BASE, "--num-gpus", "4", *FEW, "--top", "3", "--json")
    data = json.loads(out)
    assert code == 0
    assert set(data) == {"runtime", "best", "top", "rejected", "published_accuracy"}
    # h100 is hopper: the dense bf16 runs on hopper speak for the tiny model's job
    assert data["published_accuracy"]["group"]["generation"] == "hopper"
    best = data["best"]
    knobs = {f for f in ParallelPlan.__dataclass_fields__}
    assert knobs <= set(best) and set(JSON_KEYS) <= set(best)
    assert best == data["top"][0] and 1 <= len(data["top"]) <= 3
    assert best["tp"] * best["pp"] * best["cp"] * best["dp"] == 4
    assert data["rejected"]["memory"] == 0


def test_fixed_knobs_are_respected(capsys) -> None:
    code, out = run_plan(
        capsys, *BASE, "--num-gpus", "4", *FEW, "--tp", "2", "--sp", "--recompute", "full", "--json"
    )
    assert code == 0
    for entry in json.loads(out)["top"]:
        assert entry["tp"] == 2 and entry["sequence_parallel"] and entry["recompute"] == "full"


def test_plan_table_and_explanation(capsys) -> None:
    code, out = run_plan(capsys, *BASE, "--num-gpus", "4", *FEW)
    assert code == 0
    assert "best plans" in out and "Best: " in out and "Searched " in out


def test_plan_out_writes_every_file_and_exports(capsys, tmp_path) -> None:
    out_dir = tmp_path / "run"
    code, _ = run_plan(capsys, *BASE, "--num-gpus", "4", *FEW, "--out", str(out_dir))
    assert code == 0
    names = {p.name for p in out_dir.iterdir()}
    assert names == {
        "plan.json", "candidates.csv", "prediction.trace.json", "estimate.json", "candidates.json",
        "predicted.json", "plan.html",
    }  # fmt: skip
    page = (out_dir / "plan.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "Top candidates" in page
    bundle = load(PlanBundle, out_dir / "plan.json")
    assert bundle.cluster.num_gpus == 4 and bundle.model.name == "tiny"
    trace = json.loads((out_dir / "prediction.trace.json").read_text())
    assert any(e["ph"] == "X" for e in trace["traceEvents"])
    assert set(JSON_KEYS) == set(json.loads((out_dir / "estimate.json").read_text()))
    table = pd.read_csv(out_dir / "candidates.csv")
    assert {"tp", "tokens_per_s", "peak_memory_bytes", "rejected_by"} <= set(table.columns)
    listed = json.loads((out_dir / "candidates.json").read_text())
    assert listed["plans"][0]["label"] == bundle.plan.label() and "Best: " in listed["explanation"]

    code, text, _ = run_export(capsys, str(out_dir / "plan.json"), "--to", "megatron")
    assert code == 0 and "pretrain_gpt.py" in text
    assert f"--micro-batch-size {bundle.plan.micro_batch_size}" in text
    code, text, _ = run_export(capsys, str(out_dir / "plan.json"), "--to", "torchtitan")
    assert code == 0
    assert tomllib.loads(text)["training"]["seq_len"] == 512


def test_nothing_fits_exits_1_with_the_closest(capsys, tmp_path) -> None:
    argv = ["--model", "llama3-70b", "--num-gpus", "8", "--seq-len", "4096", "--global-batch", "16"]
    code, out = run_plan(capsys, *argv, *FEW, "--top", "2", "--json", "--out", str(tmp_path))
    data = json.loads(out)
    assert code == 1 and data["best"] is None and data["top"] == []
    assert len(data["closest"]) == 2 and not data["closest"][0]["fits"]
    assert not (tmp_path / "plan.json").exists() and (tmp_path / "candidates.csv").exists()
    code, out = run_plan(capsys, *argv, *FEW, "--top", "2")
    assert code == 1 and "No plan fits" in out and "Closest candidates" in out


def test_sizing_form(capsys, tmp_path) -> None:
    argv = [*BASE, *FEW, "--tokens", "1e9", "--max-gpus", "16", "--gpu-hour-usd", "2.5"]
    code, out = run_plan(capsys, *argv, "--json", "--out", str(tmp_path))
    data = json.loads(out)
    assert code == 0 and [r["num_gpus"] for r in data["rows"]] == [8, 16]
    chosen = data["chosen"]
    assert chosen["cost_usd"] == pytest.approx(chosen["gpu_hours"] * 2.5)
    assert {"sizing.csv", "sizing.json", "scaling.png", "plan.json"} <= {
        p.name for p in tmp_path.iterdir()
    }
    code, out = run_plan(capsys, *argv)
    assert code == 0 and "cluster sizing" in out and "Chosen:" in out


def test_input_errors() -> None:
    parser = argparse.ArgumentParser()
    plan_command.add_arguments(parser)
    with pytest.raises(SpecError, match="--num-gpus"):
        plan_command.run(parser.parse_args(BASE))
    with pytest.raises(SpecError, match="goal"):
        plan_command.run(parser.parse_args([*BASE, "--tokens", "1e9"]))
    with pytest.raises(SpecError, match="--candidates-limit must be >= 0, got -5"):
        plan_command.run(parser.parse_args([*BASE, "--num-gpus", "4", "--candidates-limit", "-5"]))
    with pytest.raises(SpecError, match="max_gpus must be > 0, got 0"):
        plan_command.run(parser.parse_args([*BASE, "--tokens", "1e9", "--max-gpus", "0"]))
    fixed = space_from_args(parser.parse_args([*BASE, "--num-gpus", "4", "--tp", "2"]))
    assert dict(fixed.fixed) == {"tp": 2}
    # a degree of 0 is refused as input, not divided by
    with pytest.raises(SpecError, match=r"ParallelPlan\.tp must be a positive integer, got 0"):
        plan_command.run(parser.parse_args([*BASE, "--num-gpus", "4", "--tp", "0"]))


def test_export_rejects_an_invalid_plan(capsys, tmp_path) -> None:
    run_plan(capsys, *BASE, "--num-gpus", "4", *FEW, "--out", str(tmp_path))
    data = json.loads((tmp_path / "plan.json").read_text())
    data["plan"]["tp"] = 3
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    code, _, err = run_export(capsys, str(bad), "--to", "megatron")
    assert code == 1 and "heads_divisible_by_tp" in err


def test_sizing_sizes_without_a_plan_are_rows_that_say_why(capsys, tmp_path) -> None:
    # 5 GPUs per node: 5, 10 and 20 GPUs all need a dp with a factor 5, which never divides
    # the global batch of 8 (tiny allows tp <= 2 and, with its 4 layers, pp <= 4)
    argv = [*BASE, *FEW, "--gpus-per-node", "5", "--tokens", "1e9", "--max-gpus", "20"]
    code, out = run_plan(capsys, *argv, "--json", "--out", str(tmp_path))
    data = json.loads(out)
    assert code == 1 and data["chosen"] is None
    assert [r["num_gpus"] for r in data["rows"]] == [5, 10, 20]
    for row in data["rows"]:
        assert row["plan"] is None and row["days"] is None
        # the figures are null without a plan, as the CSV leaves them empty (once 0.0)
        assert row["tokens_per_s"] is None and row["mfu"] is None
        assert "global_batch_divisible_by_mbs_dp" in row["reason"]
    table = pd.read_csv(tmp_path / "sizing.csv")
    assert table["reason"].str.contains("global_batch_divisible_by_mbs_dp").all()
    code, out = run_plan(capsys, *argv)
    assert code == 1 and "none: No plan passes the rules on 10 GPUs" in out


def test_num_gpus_beside_tokens_is_refused() -> None:
    parser = argparse.ArgumentParser()
    plan_command.add_arguments(parser)
    args = parser.parse_args([*BASE, "--num-gpus", "8", "--tokens", "1e9", "--days", "3"])
    with pytest.raises(SpecError, match="--max-gpus 8"):
        plan_command.run(args)


def test_headline_names_the_rule_when_nothing_is_valid(capsys) -> None:
    # 5 GPUs: tp 1 and pp 1 (4 layers), so dp 5, which does not divide the global batch of 8
    code, out = run_plan(capsys, *BASE, "--num-gpus", "5", *FEW)
    first = out.splitlines()[0]
    assert code == 1
    assert first.startswith("No plan passes the rules on 5 GPUs: every candidate breaks ")
    assert "global_batch_divisible_by_mbs_dp" in first and "No plan fits" not in out


def test_candidates_csv_is_limited_by_default(capsys, tmp_path) -> None:
    run_plan(capsys, *BASE, "--num-gpus", "4", *FEW, "--out", str(tmp_path / "all"),
             "--candidates-limit", "0")  # fmt: skip
    full = pd.read_csv(tmp_path / "all" / "candidates.csv", keep_default_na=False)
    run_plan(capsys, *BASE, "--num-gpus", "4", *FEW, "--out", str(tmp_path / "few"),
             "--candidates-limit", "5")  # fmt: skip
    few = pd.read_csv(tmp_path / "few" / "candidates.csv", keep_default_na=False)
    simulated = full["simulated_iteration_time_s"] != ""
    by_rule = ~full["rejected_by"].isin(["", "memory"])
    assert len(full) > len(few) == int(simulated.sum() + by_rule.sum()) + 5
    # the screened rows kept are the fastest of those that fit
    others = few[(few["simulated_iteration_time_s"] == "") & (few["rejected_by"] == "")]
    pool = full[~simulated & (full["rejected_by"] == "")]
    assert sorted(others["tokens_per_s"]) == sorted(pool["tokens_per_s"].nlargest(5))


def test_plan_html_lists_the_candidates(capsys, tmp_path) -> None:
    code, _ = run_plan(capsys, *BASE, "--num-gpus", "4", *FEW, "--top", "3", "--out", str(tmp_path))
    listed = json.loads((tmp_path / "candidates.json").read_text())["plans"]
    page = (tmp_path / "plan.html").read_text()
    table = page[page.index('id="candidates"') :]
    table = table[: table.index("</table>")]
    assert code == 0 and len(listed) >= 2
    assert table.count("<tr") == len(listed) + 1  # header row + one row per plan
    for entry in listed:
        assert f"<td>{entry['label']}</td>" in table
        assert f"{entry['mfu']:.1%}" in table


def test_plan_prints_its_runtime_and_takes_the_flag(capsys) -> None:
    code, out = run_plan(capsys, *BASE, "--num-gpus", "4", *FEW, "--top", "1")
    assert code == 0 and "runtime: megatron" in out.splitlines()
    code, out = run_plan(
        capsys, *BASE, "--num-gpus", "4", *FEW, "--top", "1", "--runtime", "torch", "--json"
    )
    data = json.loads(out)
    assert code == 0 and data["runtime"] == "torch" and data["best"]["runtime"] == "torch"


@pytest.mark.parametrize(
    "goal", [["--days", "3"], ["--budget", "1000", "--gpu-hour-usd", "2"], ["--max-gpus", "64"]]
)
def test_sizing_goals_without_tokens_are_refused_not_ignored(goal: list[str]) -> None:
    # A search on a fixed --num-gpus has no use for a deadline, a budget or a price.
    parser = argparse.ArgumentParser()
    plan_command.add_arguments(parser)
    args = parser.parse_args([*BASE, "--num-gpus", "8", *goal])
    with pytest.raises(SpecError, match=f"{goal[0]} .*only apply to cluster sizing: add --tokens"):
        plan_command.run(args)


def test_plan_names_its_memory_assumptions_before_the_runtime(capsys) -> None:
    code, out = run_plan(capsys, *BASE, "--num-gpus", "4", *FEW, "--top", "1")
    lines = out.splitlines()
    assert code == 0 and lines[-1] == "runtime: megatron"
    assert "add --grad-reduce-in-bf16" in out and "add --expandable-segments" in out
    code, out = run_plan(
        capsys, *BASE, "--num-gpus", "4", *FEW, "--top", "1", "--grad-reduce-in-bf16"
    )
    assert code == 0 and "add --grad-reduce-in-bf16" not in out


def test_plan_out_simulates_the_timeline_with_the_recipe_settings(capsys, tmp_path) -> None:
    # bf16 gradient reduction moves the data-parallel time: the written timeline is the
    # written estimate's, both priced with the search's options
    argv = [*BASE, "--num-gpus", "4", *FEW, "--top", "1", "--out", str(tmp_path)]
    code, _ = run_plan(capsys, *argv, "--grad-reduce-in-bf16")
    timeline = json.loads((tmp_path / "predicted.json").read_text())
    written = json.loads((tmp_path / "estimate.json").read_text())
    assert code == 0
    assert timeline["iteration_time_s"] == pytest.approx(written["iteration_time_s"], rel=1e-9)


def test_time_limit_is_reported_in_json_and_text(capsys, monkeypatch, tmp_path) -> None:
    from planner import screening
    from planner.pacing import MIN_PACED_ROUND_ROWS

    torch = [*BASE, "--num-gpus", "4", *FEW, "--top", "2", "--runtime", "torch"]
    code, out = run_plan(capsys, *torch, "--time-limit", "3600", "--json")
    limit = json.loads(out)["time_limit"]
    assert code == 0 and limit["reached"] is False and limit["not_reached"] == 0
    assert limit["limit_s"] == 3600 and limit["note"] == ""
    # small rounds and a limit that has passed when the first round ends
    monkeypatch.setattr(screening, "FIRST_PACED_ROUND_ROWS", MIN_PACED_ROUND_ROWS)
    code, out = run_plan(capsys, *torch, "--time-limit", "1e-9", "--json")
    data = json.loads(out)
    limit = data["time_limit"]
    assert code == 0 and data["best"] is not None and limit["reached"] is True
    assert 0 < limit["screened"] < limit["valid"] and limit["not_reached"] > 0
    assert limit["note"].startswith("Time limit of 1e-09 s reached: ")
    assert limit["simulated"] == len(data["top"]) == 2 and limit["not_simulated"] == 0
    code, out = run_plan(capsys, *torch, "--time-limit", "1e-9")
    assert code == 0 and "the plans ranked are the best of those screened" in out
    # candidates.csv names the unscreened rows; a limited one keeps the screened first
    for candidates_limit, unscreened in (("0", limit["not_reached"]), ("3", 0)):
        out_dir = tmp_path / candidates_limit
        cut = ["--time-limit", "1e-9", "--candidates-limit", candidates_limit]
        code, _ = run_plan(capsys, *torch, *cut, "--out", str(out_dir))
        frame = pd.read_csv(out_dir / "candidates.csv", keep_default_na=False)
        assert code == 0 and (frame["rejected_by"] == "time_limit").sum() == unscreened


@pytest.mark.parametrize("limit", ["0", "-1", "nan"])
@pytest.mark.parametrize("form", [["--num-gpus", "4"], ["--tokens", "1e9", "--max-gpus", "8"]])
def test_time_limit_not_positive_is_refused_with_its_flag(capsys, form, limit) -> None:
    """One rule (`planner.pacing.SearchPace`), worded with the flag by `paraplan.cli`."""
    from paraplan.cli import main

    code = main(["plan", *BASE, *form, "--time-limit", limit])
    err = capsys.readouterr().err
    assert code == 2
    assert f"--time-limit (SearchPace.time_limit_s) must be > 0 seconds, got {limit}" in err
    assert "leave it unset for no limit" in err


def test_time_limit_bounds_the_sizing_run(capsys) -> None:
    argv = [*BASE, *FEW, "--tokens", "1e9", "--max-gpus", "16"]
    code, out = run_plan(capsys, *argv, "--time-limit", "3600", "--json")
    limit = json.loads(out)["time_limit"]
    assert code == 0 and limit["reached"] is False and limit["note"] == ""
    assert limit["searched"] == [8, 16] and limit["not_searched"] == []
    # a limit that has passed once the first size is searched: the second is not
    code, out = run_plan(capsys, *argv, "--time-limit", "1e-9", "--json")
    data = json.loads(out)
    limit = data["time_limit"]
    assert code == 0 and [r["num_gpus"] for r in data["rows"]] == [8]
    assert limit["reached"] is True and limit["searched"] == [8]
    assert limit["not_searched"] == [16] and data["chosen"]["num_gpus"] == 8
    assert limit["note"].startswith("Time limit of 1e-09 s reached over the sizing run")
    code, out = run_plan(capsys, *argv, "--time-limit", "1e-9")
    assert code == 0 and "not searched: 16 GPUs" in out and "Chosen: 8 GPUs" in out


def test_export_refuses_a_launch_line_of_partial_nodes(capsys, tmp_path) -> None:
    # 12 GPUs on 8-GPU nodes once exported as --nproc-per-node 8 --nnodes 2: 16 ranks
    bundle = PlanBundle(
        model=get_preset("tiny"),
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=12),
        job=TrainingJob(seq_length=512, global_batch_size=12),
        plan=ParallelPlan(dp=12),
    )
    path = tmp_path / "plan.json"
    path.write_text(dumps(bundle))
    with pytest.raises(SpecError, match="do not fill whole nodes of 8 GPUs"):
        run_export(capsys, str(path), "--to", "megatron")
    code, out, _ = run_export(capsys, str(path), "--to", "megatron", "--gpus-per-node", "4")
    assert code == 0 and "--nproc-per-node 4 --nnodes 3" in out


def test_fp8_parameters_of_an_adam_job_search_only_sharded_optimizers() -> None:
    # validate_args: "--fp8-param-gather only supported with distributed optimizer, torch
    # fsdp2, megatron fsdp"; the search once ranked DDP plans with FP8 parameters, which
    # export then refused. Muon excludes those optimizers and gathers layer-wise itself.
    parser = argparse.ArgumentParser()
    plan_command.add_arguments(parser)
    argv = [*BASE, "--num-gpus", "4", "--precision", "fp8", "--fp8-param-gather"]
    assert space_from_args(parser.parse_args(argv)).sharded_optimizer_only
    muon = parser.parse_args([*argv, "--optimizer", "dist_muon"])
    assert not space_from_args(muon).sharded_optimizer_only
