"""Inputs a user gets wrong, run through the command line's `main`: each is answered with
its exit code and a message naming the rule, the values and the fix, never an empty
search or a traceback."""

from __future__ import annotations

import pytest

from tests.paraplan.cli_helpers import run_cli

TINY_MOE = [
    "--model",
    "tiny-moe",
    "--hardware",
    "h100-sxm-80gb",
    "--num-gpus",
    "8",
    "--seq-len",
    "512",
    "--global-batch",
    "8",
]


def test_plan_with_a_pinned_ep_no_expert_grid_fits_names_the_rule(capsys) -> None:
    # tiny-moe has 8 experts; ep 3 divides neither them nor the 8 ranks of a stage, so no
    # etp was generated beside it and the search was empty ("No candidate plan exists")
    code, out, _ = run_cli(capsys, "plan", *TINY_MOE, "--ep", "3", "--max-mbs", "1")
    first = out.splitlines()[0]
    assert code == 1
    assert first.startswith("No plan passes the rules on 8 GPUs: every candidate breaks ")
    assert "experts_divisible_by_ep" in out and "expert_grid_divides_world" in out
    assert "try ep in {1, 2, 4, 8}" in out and "No candidate plan exists" not in out


@pytest.mark.parametrize("ep", ["2", "4"])
def test_plan_with_a_pinned_ep_that_fits_still_searches(capsys, ep: str) -> None:
    code, out, _ = run_cli(capsys, "plan", *TINY_MOE, "--ep", ep, "--max-mbs", "1", "--top", "1")
    assert code == 0 and f" ep{ep} " in out.split("Best: ", 1)[1].splitlines()[0]


def test_a_misspelt_flag_is_named_before_the_required_one_it_misses(capsys) -> None:
    # argparse reported "the following arguments are required: --global-batch/...",
    # never the misspelt --global-bach that was meant to give it
    argv = ["--model", "tiny", "--num-gpus", "8", "--seq-len", "512", "--global-bach", "8"]
    code, out, err = run_cli(capsys, "plan", *argv)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert err.startswith(
        "paraplan plan: error: unrecognized arguments: --global-bach (did you mean "
        "--global-batch?) (`paraplan plan --help` lists the flags)"
    )


def test_a_misspelt_flag_with_its_value_after_an_equals_sign(capsys) -> None:
    argv = [*TINY_MOE, "--tp", "1", "--pipline-model-parallel-size=1"]
    code, _, err = run_cli(capsys, "check", *argv)
    assert code == 2
    assert "--pipline-model-parallel-size=1 (did you mean --pipeline-model-parallel-size?)" in err


def test_a_unique_prefix_of_a_flag_is_still_taken(capsys) -> None:
    # argparse's abbreviations: --seq-length is the only flag starting with --seq-lengt
    argv = ["--model", "tiny-moe", "--num-gpus", "8", "--seq-lengt", "512", "--global-batch", "8"]
    code, out, _ = run_cli(capsys, "check", *argv, "--tp", "1")
    assert code == 0 and "valid" in out


def test_estimate_of_a_plan_over_memory_names_the_overshoot_and_changes_that_fit(capsys) -> None:
    # 131,072 tokens of Llama 3 70B on one tp8 node: the table said `fits in device memory
    # NO` and nothing else; cp and pp over more GPUs fit
    argv = ["--model", "llama3-70b", "--num-gpus", "8", "--seq-len", "131072"]
    code, out, _ = run_cli(capsys, "estimate", *argv, "--global-batch", "8", "--tp", "8")
    assert code == 0
    head, *changes = out.split("does not fit: peak ", 1)[1].splitlines()[:5]
    assert "GiB on pipeline stage 0, " in head and "GiB over the 79.6 GiB of device memory" in head
    assert changes[0].endswith("(fits)") and all(c.startswith("    - ") for c in changes)
    assert any(c.startswith("    - --cp ") for c in changes)


def test_estimate_of_a_plan_that_fits_prints_no_overshoot(capsys) -> None:
    code, out, _ = run_cli(capsys, "estimate", *TINY_MOE, "--tp", "1")
    assert code == 0 and "does not fit" not in out


def test_plan_with_a_pinned_tp_names_the_rule_it_breaks_not_the_batch_it_causes(capsys) -> None:
    # tp 3 on 8 GPUs leaves dp = 2, which does not divide the batch of 9 either: every
    # candidate broke four rules and the headline named the alphabetically first,
    # global_batch_divisible_by_mbs_dp, whose fix (another batch) does not help
    argv = ["--model", "tiny", "--num-gpus", "8", "--seq-len", "512", "--global-batch", "9"]
    code, out, _ = run_cli(capsys, "plan", *argv, "--tp", "3", "--max-mbs", "1")
    first = out.splitlines()[0]
    assert code == 1 and "global_batch_divisible_by_mbs_dp" not in first
    assert first.startswith(
        "No plan passes the rules on 8 GPUs: every candidate breaks world_size_matches: tp (3)"
    )
    assert "choose tp, pp, cp whose product is in {1, 2, 4, 8}" in first
    rejected = next(line for line in out.splitlines() if line.startswith("Rejected: "))
    assert rejected.index("world_size_matches") < rejected.index("global_batch_divisible")


@pytest.mark.parametrize(
    ("command", "recompute"),
    [
        ("estimate", ["--recompute", "selective"]),
        ("check", []),  # no recompute
        ("plan", ["--recompute-modules", "core_attn"]),  # selective, implied
    ],
)
def test_a_recompute_method_without_full_recompute_is_refused(
    capsys, command: str, recompute: list[str]
) -> None:
    # Megatron-LM's validate_args asserts recompute_method is None under selective
    # recompute; the method was taken and dropped without a word
    degrees = ["--tp", "1"] if command != "plan" else []
    argv = [command, *TINY_MOE, *degrees, *recompute, "--recompute-method", "block"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out
    assert err.startswith(
        f"paraplan {command}: error: --recompute-method block applies to --recompute full only"
    )
    assert "give --recompute full, or drop --recompute-method" in err


def test_a_recompute_method_with_full_recompute_is_priced(capsys) -> None:
    argv = [*TINY_MOE, "--tp", "1", "--recompute", "full", "--recompute-method", "block"]
    code, out, _ = run_cli(capsys, "estimate", *argv, "--json")
    assert code == 0 and '"iteration_time_s"' in out


def test_plan_on_gpus_that_fill_no_whole_nodes_says_export_will_refuse(capsys) -> None:
    # 12 GPUs on 8-GPU nodes: the search priced them without a word, and only
    # `paraplan export --to megatron` of the pick said that torchrun cannot launch them
    argv = ["--model", "tiny", "--num-gpus", "12", "--seq-len", "512", "--global-batch", "12"]
    code, out, err = run_cli(capsys, "plan", *argv, "--max-mbs", "1", "--top", "1")
    assert code == 0 and "Best: " in out
    note = next(line for line in err.splitlines() if line.startswith("paraplan plan: note: "))
    assert "12 GPUs do not fill whole nodes of 8 GPUs" in note
    assert "give --gpus-per-node 6" in note and "`paraplan export --to megatron` refuses" in note
    code, _, err = run_cli(capsys, "plan", *TINY_MOE, "--max-mbs", "1", "--top", "1")
    assert code == 0 and "note:" not in err
