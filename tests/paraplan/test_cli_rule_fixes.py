"""A refused plan's fix in the command line's own flags (`paraplan.fix_flags`), through
`paraplan.cli.main`: `check`, `estimate`, `plan` (search and sizing) and `export`, the text,
the JSON and a `SpecError` line; the Python API keeps the spec fields."""

from __future__ import annotations

import json

from paraplan.cli import main
from specs import ClusterSpec, TrainingJob
from specs.bundle import PlanBundle
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.serde import dumps
from tests.paraplan.cli_helpers import run_cli

BASE = ["--model", "tiny", "--num-gpus", "8", "--seq-len", "512", "--global-batch", "8"]
FIELD_FIX = "set sequence_parallel=False or tp > 1"
"""The fix of `specs.rules_features.sequence_parallel_needs_tp` as the API gives it."""
FLAG_FIX = "use --no-sp or tp > 1"


def test_check_prints_the_fix_in_flags(capsys) -> None:
    code, out, _ = run_cli(capsys, "check", *BASE, "--tp", "1", "--sp")
    assert code == 1 and "[sequence_parallel_needs_tp] " in out
    assert FLAG_FIX in out and FIELD_FIX not in out


def test_check_json_gives_the_flag_form_too(capsys) -> None:
    code, out, _ = run_cli(capsys, "check", *BASE, "--tp", "2", "--tp-comm-overlap", "--json")
    violations = json.loads(out)["violations"]
    assert code == 1 and [v["rule"] for v in violations] == [
        "tp_comm_overlap_needs_sequence_parallel"
    ]
    assert violations[0]["message"].endswith("got sequence_parallel (False): use --sp")


def test_estimate_names_the_flags_of_several_fixes(capsys) -> None:
    argv = [*BASE, "--tp", "2", "--overlap-param-gather", "--recompute-num-layers", "1"]
    code, out, _ = run_cli(capsys, "estimate", *argv)
    assert code == 1
    assert "use --dist-opt, --use-megatron-fsdp or drop --overlap-param-gather" in out
    assert "use --overlap-grad-reduce or drop --overlap-param-gather" in out
    assert "use --recompute full or drop --recompute-num-layers" in out
    assert "distributed_optimizer=True" not in out and "recompute_num_layers=None" not in out


def test_a_refusal_raised_as_spec_error_names_the_flags(capsys) -> None:
    argv = [*BASE, "--runtime", "torch", "--cudnn-norm"]
    code, out, err = run_cli(capsys, "estimate", *argv)
    assert code == 2 and not out
    assert err.rstrip().endswith("use --runtime megatron, or drop --cudnn-norm")


def test_plan_refused_by_a_rule_prints_the_flag_form(capsys) -> None:
    code, out, _ = run_cli(capsys, "plan", *BASE, "--tp", "1", "--sp", "--max-mbs", "1")
    first = out.splitlines()[0]
    assert code == 1 and first.startswith("No plan passes the rules on 8 GPUs: every candidate")
    assert first.endswith(FLAG_FIX)
    assert "e.g. sequence_parallel_needs_tp: " in out and FIELD_FIX not in out


def test_plan_sizing_gives_the_reason_of_each_size_in_flags(capsys) -> None:
    argv = ["--model", "tiny", "--seq-len", "512", "--global-batch", "8", "--tokens", "1e9"]
    code, out, _ = run_cli(
        capsys, "plan", *argv, "--max-gpus", "8", "--tp", "1", "--sp", "--max-mbs", "1", "--json"
    )
    rows = json.loads(out)["rows"]
    assert code == 1 and rows and all(r["reason"].endswith(FLAG_FIX) for r in rows)


def test_export_of_a_plan_breaking_a_rule_prints_the_flag_form(capsys, tmp_path) -> None:
    bundle = PlanBundle(
        model=get_preset("tiny"),
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8),
        job=TrainingJob(seq_length=512, global_batch_size=8),
        plan=ParallelPlan(dp=8, sequence_parallel=True),
    )
    path = tmp_path / "plan.json"
    path.write_text(dumps(bundle))
    code, out, err = run_cli(capsys, "export", str(path), "--to", "megatron")
    assert code == 1 and not out
    assert "[sequence_parallel_needs_tp]" in err and FLAG_FIX in err


def test_main_returns_the_same_codes_as_before(capsys) -> None:
    # the rewrite changes text only: a valid plan is still valid, exit 0
    assert main(["check", *BASE, "--tp", "2", "--sp"]) == 0
    assert "valid: tp2 pp1 dp4 mbs1 sp" in capsys.readouterr().out


# Fit suggestions (`planner.explain_fit`): the API's changes name spec fields, the CLI flags.
OVER = ["--model", "llama3-8b", "--num-gpus", "8", "--seq-len", "4096", "--global-batch", "32"]


def test_estimate_prints_the_fit_suggestions_in_flags(capsys) -> None:
    # Llama 3 8B at tp2 dp4 mbs1, no recompute: 4096 tokens overflow an H100; Megatron-FSDP
    # and deeper pipelines with every memory saver fit (tests/planner/test_search.py), each
    # saver named by its flag.
    code, out, _ = run_cli(capsys, "estimate", *OVER, "--tp", "2", "--mbs", "1")
    lines = out.split("changes and their peak memory:")[1].splitlines()[1:5]
    assert code == 0 and all(line.startswith("    - --") for line in lines), lines
    savers = "--recompute full --recompute-num-layers 1 --dist-opt --sp"
    assert f"    - --pp 4 {savers}: " in out
    fsdp = "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params "
    assert fsdp in out and "use_megatron_fsdp=True" not in out and "pp=4 " not in out


def test_plan_prints_the_closest_candidates_changes_in_flags(capsys) -> None:
    argv = ["--model", "llama3-70b", "--num-gpus", "8", "--seq-len", "4096", "--global-batch"]
    code, out, _ = run_cli(capsys, "plan", *argv, "16")
    changes = out.split("Closest candidates:")[1]
    assert code == 1 and "    - --pp 4 on 32 GPUs: " in changes
    assert "    - pp=" not in changes and "    - cp=" not in changes


def test_the_api_keeps_the_fit_suggestions_in_spec_fields() -> None:
    from planner.explain_fit import fit_suggestions

    model, job = get_preset("llama3-8b"), TrainingJob(seq_length=4096, global_batch_size=32)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    plan = ParallelPlan(tp=2, dp=4, micro_batch_size=1)
    changes = [s.change for s in fit_suggestions(model, cluster, job, plan, 80 * 2**30)]
    savers = "recompute=full recompute_num_layers=1 distributed_optimizer=True"
    assert f"pp=4 {savers} sequence_parallel=True" in changes
    assert "sequence_parallel=True" in changes
