"""`paraplan estimate`, called through its own parser (paraplan.commands.estimate)."""

from __future__ import annotations

import argparse
import json

import pytest

from costmodel.estimate import JSON_KEYS
from paraplan.commands import estimate
from specs.errors import SpecError

BASE = [
    "--model",
    "llama3-8b",
    "--num-gpus",
    "16",
    "--seq-len",
    "8192",
    "--global-batch",
    "64",
]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="paraplan estimate")
    estimate.add_arguments(parser)
    code = estimate.run(parser.parse_args([*BASE, *argv]))
    return code, capsys.readouterr().out


def test_module_contract():
    assert estimate.NAME == "estimate"
    assert "MFU" in estimate.HELP


def test_json_has_the_documented_keys(capsys):
    code, out = run(capsys, "--tp", "4", "--pp", "2", "--sp", "--dist-opt", "--json")
    data = json.loads(out)
    assert code == 0
    assert tuple(data) == (*JSON_KEYS, "published_accuracy")
    assert data["iteration_time_s"] > 0 and 0 < data["mfu"] < 1
    assert len(data["memory"]) == 2 and data["fits"] is True
    assert set(data["breakdown"]) >= {"compute_forward", "bubble", "tp_exposed", "dp_exposed"}


def test_readable_summary(capsys):
    code, out = run(capsys, "--tp", "2", "--pp", "2", "--vpp", "2", "--recompute", "selective")
    assert code == 0
    assert "iteration time" in out and "where the time goes" in out and "memory per rank" in out
    # the plan line is one line, never wrapped at the summary table's width
    assert out.splitlines()[0] == (
        "llama3-8b on 16 x h100-sxm-80gb: tp2 pp2 vpp2 dp4 mbs1 rc-sel (runtime megatron)"
    )


def test_materialized_attention_is_slower(capsys):
    _, flash = run(capsys, "--tp", "4", "--json")
    _, unfused = run(capsys, "--tp", "4", "--attention", "materialized", "--json")
    assert json.loads(unfused)["iteration_time_s"] > json.loads(flash)["iteration_time_s"]


def test_attention_beside_the_torch_runtime_is_refused(capsys):
    # the torch runtime ignored --attention without a word
    with pytest.raises(SpecError, match="--attention materialized chooses the attention"):
        run(capsys, "--attention", "materialized", "--runtime", "torch")


def test_invalid_plan_prints_violations_and_exits_1(capsys):
    code, out = run(capsys, "--tp", "3")
    assert code == 1
    assert "heads_divisible_by_tp" in out and "world_size_matches" in out


def test_bad_hardware_is_a_spec_error():
    parser = argparse.ArgumentParser()
    estimate.add_arguments(parser)
    args = parser.parse_args([*BASE, "--hardware", "no-such-gpu"])
    with pytest.raises(SpecError, match="unknown hardware profile"):
        estimate.run(args)


def test_the_runtime_is_chosen_by_flag_printed_and_in_the_json(capsys):
    code, out = run(capsys, "--tp", "4", "--json")
    assert code == 0 and json.loads(out)["runtime"] == "megatron"  # the default
    code, out = run(capsys, "--tp", "4", "--runtime", "torch", "--json")
    torch_run = json.loads(out)
    assert code == 0 and torch_run["runtime"] == "torch"
    code, out = run(capsys, "--tp", "4", "--runtime", "torch")
    assert code == 0 and "(runtime torch)" in out
    with pytest.raises(SystemExit):
        run(capsys, "--runtime", "torch_native")


def test_schedule_rounding_residues_print_as_zero(capsys):
    # DeepSeek-V3 on pp 1 with Megatron-FSDP: the schedule's sums leave a bubble of a few
    # 1e-15 s, which the JSON keeps and the table shows as 0.
    argv = [
        *("--model", "deepseek-v3", "--hardware", "gb200-nvl72", "--num-gpus", "256"),
        *("--seq-len", "4096", "--global-batch", "4096", "--ep", "64", "--use-megatron-fsdp"),
        *("--recompute", "selective", "--recompute-modules", "mla_up_proj"),
    ]
    parser = argparse.ArgumentParser(prog="paraplan estimate")
    estimate.add_arguments(parser)
    assert estimate.run(parser.parse_args([*argv, "--json"])) == 0
    bubble = json.loads(capsys.readouterr().out)["breakdown"]["bubble"]
    assert abs(bubble) < 1e-9
    assert estimate.run(parser.parse_args(argv)) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "bubble" in line)
    assert "e-" not in row and " 0 " in row


@pytest.mark.parametrize("shape", [("--pp", "2"), ("--pp", "4"), ("--tp", "2", "--pp", "2")])
def test_torch_runtime_prices_pipelines_that_span_servers(capsys, shape):
    """16 ranks over two 8-GPU servers: the step-end loss all-reduce spans both."""
    code, out = run(capsys, "--runtime", "torch", *shape, "--json")
    assert code == 0
    assert json.loads(out)["iteration_time_s"] > 0


def test_recipe_flags_move_memory_and_the_summary_names_them(capsys):
    """Llama 3.1 405B tp4 pp8 vpp8 cp2 fp8 on 128 B200 (published-runs row 337 shape): the
    Megatron-Bridge FP8 recipe's FP8 parameters and bf16 gradients are flags."""
    argv = [
        "--model", "llama3.1-405b", "--hardware", "b200", "--num-gpus", "128",
        "--seq-len", "8192", "--global-batch", "64", "--precision", "fp8", "--tp", "4",
        "--pp", "8", "--vpp", "8", "--cp", "2", "--sp", "--dist-opt",
        "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
    ]  # fmt: skip
    parser = argparse.ArgumentParser(prog="paraplan estimate")
    estimate.add_arguments(parser)

    def peak(*extra: str) -> float:
        estimate.run(parser.parse_args([*argv, *extra, "--json"]))
        return json.loads(capsys.readouterr().out)["peak_memory_gib"]

    default = peak()
    fp8_params = peak("--fp8-recipe", "tensorwise", "--fp8-param-gather")
    bf16_grads = peak("--fp8-recipe", "tensorwise", "--fp8-param-gather", "--grad-reduce-in-bf16")
    assert bf16_grads < fp8_params < default
    estimate.run(parser.parse_args(argv))
    out = capsys.readouterr().out
    assert "add --grad-reduce-in-bf16" in out and "add --fp8-param-gather" in out
    estimate.run(parser.parse_args([*argv, "--fp8-param-gather", "--grad-reduce-in-bf16"]))
    out = capsys.readouterr().out
    assert "add --grad-reduce-in-bf16" not in out and "FP8 parameters" in out


def test_loss_and_allocator_flags_move_memory_and_the_summary_names_them(capsys):
    """Transformer Engine's fused cross entropy keeps no fp32 logits on the last stage;
    expandable segments halve the fragmentation allowance (`FrameworkAllowance`)."""
    argv = ["--tp", "2", "--pp", "2", "--sp", "--dist-opt"]

    def stages(*extra: str) -> list[dict]:
        code, out = run(capsys, *argv, *extra, "--json")
        assert code == 0
        return json.loads(out)["memory"]

    default = stages()
    fused = stages("--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te")
    native = stages("--cross-entropy-loss-fusion")
    expandable = stages("--expandable-segments")
    last = default[-1]["parts"]["output_activations"]
    assert fused[-1]["parts"]["output_activations"] < last
    assert native[-1]["parts"]["output_activations"] == last
    assert fused[0]["total_gib"] == default[0]["total_gib"]
    for got, want in zip(expandable, default, strict=True):
        assert got["parts"]["framework"] < want["parts"]["framework"]
    _, out = run(capsys, *argv)
    assert "add --cross-entropy-loss-fusion" in out and "add --expandable-segments" in out
    _, out = run(
        capsys,
        *argv,
        "--cross-entropy-loss-fusion",
        "--cross-entropy-fusion-impl",
        "te",
        "--expandable-segments",
    )
    assert "add --cross-entropy-loss-fusion" not in out and "add --expandable-segments" not in out


def test_fused_loss_kernel_without_the_fusion_is_refused(capsys):
    with pytest.raises(SpecError, match="--cross-entropy-loss-fusion"):
        run(capsys, "--cross-entropy-fusion-impl", "te")


def test_fp8_summary_says_which_device_keeps_weight_transposes(capsys):
    fp8 = ["--precision", "fp8", "--fp8-recipe", "tensorwise", "--fp8-param-gather", "--dist-opt"]
    _, hopper = run(capsys, *fp8)
    _, blackwell = run(capsys, *fp8, "--hardware", "b200")
    assert "take only TN" in hopper and "no FP8 weight transposes" in blackwell


def test_json_of_an_invalid_plan_is_the_rule_check(capsys):
    # --json once printed the text verdict, which a JSON reader cannot parse
    code, out = run(capsys, "--pp", "3", "--json")
    data = json.loads(out)
    assert code == 1 and data["valid"] is False and data["plan"].startswith("tp1 pp3")
    assert "layers_divisible_by_pp" in {v["rule"] for v in data["violations"]}


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--fp8-recipe", "tensorwise"], "but the job is --precision bf16"),
        (["--fp8-param-gather", "--dist-opt"], "but the job is --precision bf16"),
        (["--precision", "fp8", "--fp8-recipe", "mxfp8"], "the h100-sxm-80gb is hopper"),
    ],
)
def test_fp8_flags_the_job_or_device_cannot_run_exit_2(capsys, flags, needle):
    # once priced as a bf16 (or Hopper) job, the flags ignored, and export then refused them
    from paraplan.cli import main

    assert main(["estimate", *BASE, *flags]) == 2
    assert needle in capsys.readouterr().err


def test_fp8_param_gather_needs_a_sharded_optimizer(capsys):
    # Megatron-LM's validate_args takes --fp8-param-gather only with the distributed
    # optimizer or Megatron-FSDP; the plan was priced and the export refused it
    code, out = run(capsys, "--precision", "fp8", "--fp8-param-gather", "--json")
    rules = {v["rule"] for v in json.loads(out)["violations"]}
    assert code == 1 and rules == {"fp8_param_gather_needs_distributed_optimizer"}
    code, _ = run(capsys, "--precision", "fp8", "--fp8-param-gather", "--dist-opt", "--json")
    assert code == 0


def test_fp8_parameters_of_a_dist_muon_job_are_left_to_the_muon_rules(capsys):
    # dist_muon excludes --dist-opt and gathers layer-wise; Megatron-Bridge runs it with
    # FP8 parameters (Kimi-K2 MXFP8 rows of the bench)
    flags = ["--precision", "fp8", "--fp8-param-gather", "--optimizer", "dist_muon", "--json"]
    code, _ = run(capsys, *flags)
    assert code == 0


def test_delayed_scaling_with_moe_act_recompute_is_a_violation(capsys):
    # TEGroupedMLP.__init__ sets save_original_input on linear_fc2 under moe_act; TE raises
    # under delayed scaling (costmodel.saved_inputs.delayed_scaling_problem)
    argv = [
        *("--model", "mixtral-8x7b", "--num-gpus", "16", "--ep", "8", "--precision", "fp8"),
        *("--recompute", "selective", "--recompute-modules", "moe_act", "--json"),
    ]
    parser = argparse.ArgumentParser(prog="paraplan estimate")
    estimate.add_arguments(parser)
    base = ["--seq-len", "4096", "--global-batch", "64"]
    assert estimate.run(parser.parse_args([*argv, *base])) == 1
    rules = {v["rule"] for v in json.loads(capsys.readouterr().out)["violations"]}
    assert rules == {"delayed_scaling_refuses_original_input"}
    tensorwise = [*argv, *base, "--fp8-recipe", "tensorwise"]
    assert estimate.run(parser.parse_args(tensorwise)) == 0
