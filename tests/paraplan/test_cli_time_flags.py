"""The time-only recipe flags (`paraplan.time_args`): each sets its `ExecutionOptions`
field, bad values and combinations are refused with the flag's name, and `estimate` and
`plan` take them."""

from __future__ import annotations

import argparse
import json

import pytest

from costmodel.execution_presets import DEFAULT_OPTIONS
from paraplan.cli import main
from paraplan.commands import estimate
from paraplan.commands import plan as plan_command
from paraplan.recipe_args import options_from_args
from specs.errors import SpecError
from tests.paraplan.cli_helpers import parse_estimate, run_estimate_json

BASE = ["--model", "llama3-8b", "--num-gpus", "16", "--seq-len", "8192", "--global-batch", "64"]


def estimate_args(*argv: str) -> argparse.Namespace:
    return parse_estimate(BASE, *argv)


def estimate_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    return run_estimate_json(capsys, BASE, *argv)


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (("--moe-token-dispatcher-type", "flex"), "moe_dispatcher", "flex"),
        (("--moe-token-dispatcher-type", "allgather"), "moe_dispatcher", "allgather"),
        (("--overlap-moe-expert-parallel-comm",), "moe_a2a_overlap", True),
        (("--no-rope-fusion",), "rope_fusion", False),
        (("--cutedsl-fused-grouped-mlp",), "moe_fused_grouped_mlp", True),
        (("--cudnn-norm",), "cudnn_norm", True),
        (("--flash-attention-version", "2"), "flash_attention_version", 2),
        (
            (
                "--tp",
                "2",
                "--sp",
                "--tp-comm-overlap",
                "--tp-comm-overlap-rs-method",
                "ring_exchange",
            ),
            "tp_overlap_rs_method",
            "ring_exchange",
        ),
        (
            ("--tp", "2", "--sp", "--tp-comm-overlap", "--no-tp-comm-overlap-bulk-sm-margin"),
            "tp_overlap_bulk_sm_margin",
            False,
        ),
        (
            ("--tp", "2", "--sp", "--tp-comm-overlap", "--no-tp-comm-overlap-pipeline-sm-margin"),
            "tp_overlap_pipeline_sm_margin",
            False,
        ),
    ],
)
def test_each_flag_sets_its_option(argv, field, value):
    options = options_from_args(estimate_args(*argv))
    assert getattr(options, field) == value
    assert getattr(DEFAULT_OPTIONS, field) != value


def test_without_the_flags_the_options_are_megatron_cores_defaults():
    assert options_from_args(estimate_args()) == DEFAULT_OPTIONS


@pytest.mark.parametrize(
    ("argv", "scopes"),
    [
        (("--cuda-graph-impl", "none"), frozenset()),
        (("--cuda-graph-impl", "local"), frozenset({"layer"})),
        (("--cuda-graph-impl", "transformer_engine"), frozenset({"layer"})),
        (("--cuda-graph-impl", "full_iteration"), frozenset({"full_iteration"})),
        (
            ("--cuda-graph-impl", "local", "--cuda-graph-scope", "full_iteration"),
            frozenset({"full_iteration"}),
        ),
        (
            ("--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "attn", "moe_router"),
            frozenset({"attn", "moe_router"}),
        ),
        (
            ("--cuda-graph-impl", "transformer_engine", "--cuda-graph-modules", "moe_router,attn"),
            frozenset({"attn", "moe_router"}),
        ),
        # Megatron-core CudaGraphModule.mamba (Megatron-Bridge's Nemotron-H recipes).
        (
            ("--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "attn", "mamba"),
            frozenset({"attn", "mamba"}),
        ),
    ],
)
def test_cuda_graph_flags_name_the_captured_scopes(argv, scopes):
    assert options_from_args(estimate_args(*argv)).cuda_graph_scopes == scopes


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (("--cuda-graph-scope", "attn"), "add --cuda-graph-impl"),
        (
            ("--cuda-graph-impl", "full_iteration", "--cuda-graph-scope", "attn"),
            "--cuda-graph-impl",
        ),
        (
            ("--cuda-graph-impl", "local", "--cuda-graph-scope", "attn", "full_iteration"),
            "stands alone",
        ),
        (("--cuda-graph-impl", "local", "--cuda-graph-scope", "attention"), "valid: attn"),
        (("--tp-comm-overlap-rs-method", "ring_exchange"), "add --tp-comm-overlap"),
        (("--no-tp-comm-overlap-bulk-sm-margin",), "add --tp-comm-overlap"),
    ],
)
def test_bad_combinations_are_refused_with_the_fix(argv, match):
    with pytest.raises(SpecError, match=match):
        options_from_args(estimate_args(*argv))


@pytest.mark.parametrize(
    "argv",
    [
        ("--moe-token-dispatcher-type", "deepep"),
        ("--flash-attention-version", "4"),
        ("--cuda-graph-impl", "cudagraph"),
        ("--tp-comm-overlap-rs-method", "bulk"),
    ],
)
def test_bad_values_exit_2_with_one_line(capsys, argv):
    with pytest.raises(SystemExit) as exc:  # argparse usage errors
        main(["estimate", *BASE, *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert argv[0] in err and "invalid choice" in err and "Traceback" not in err


def test_a_refused_combination_exits_2_through_the_command_line(capsys):
    assert main(["estimate", *BASE, "--cuda-graph-scope", "attn"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("paraplan estimate: error: --cuda-graph-scope attn")
    assert err.count("\n") == 1


def test_time_flags_move_time_not_memory(capsys):
    """FlashAttention-2 kernels and the unfused rotary embedding slow the H100 step; the
    memory per stage stays."""
    default = estimate_json(capsys, "--tp", "2")
    fa2 = estimate_json(capsys, "--tp", "2", "--flash-attention-version", "2")
    unfused_rope = estimate_json(capsys, "--tp", "2", "--no-rope-fusion")
    for slower in (fa2, unfused_rope):
        assert slower["iteration_time_s"] > default["iteration_time_s"]
        assert slower["memory"] == default["memory"]


def test_moe_dispatcher_and_graphs_move_a_moe_step(capsys):
    moe = ["--model", "qwen3-30b-a3b", "--hardware", "gb200-nvl72", "--num-gpus", "8"]
    moe += ["--seq-len", "4096", "--global-batch", "64", "--ep", "8", "--dist-opt"]

    def seconds(*extra: str) -> float:
        parser = argparse.ArgumentParser(prog="paraplan estimate")
        estimate.add_arguments(parser)
        assert estimate.run(parser.parse_args([*moe, *extra, "--json"])) == 0
        return json.loads(capsys.readouterr().out)["iteration_time_s"]

    eager = seconds()
    graphed = seconds("--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "moe")
    assert graphed < eager
    assert seconds("--moe-token-dispatcher-type", "flex") != eager


def test_plan_takes_the_time_flags(capsys):
    parser = argparse.ArgumentParser()
    plan_command.add_arguments(parser)
    base = ["--model", "tiny", "--num-gpus", "4", "--seq-len", "512", "--global-batch", "8"]
    searched = parser.parse_args([*base, "--tp-comm-overlap-rs-method", "ring_exchange"])
    assert options_from_args(searched).tp_overlap_rs_method == "ring_exchange"
    pinned_off = parser.parse_args(
        [*base, "--no-tp-comm-overlap", "--tp-comm-overlap-rs-method", "ring_exchange"]
    )
    with pytest.raises(SpecError, match="add --tp-comm-overlap"):
        options_from_args(pinned_off)
    graphs = parser.parse_args([*base, "--cuda-graph-impl", "local", "--no-rope-fusion"])
    options = options_from_args(graphs)
    assert options.cuda_graph_scopes == {"layer"} and not options.rope_fusion


def test_estimate_refuses_the_a2a_overlap_where_megatron_core_asserts(capsys):
    # TransformerConfig.__post_init__ asserts ep > 1 and, for pp > 1, a virtual pipeline
    # under overlap_moe_expert_parallel_comm; estimate lists each unmet requirement.
    code = main(
        [
            "estimate", "--model", "mixtral-8x7b", "--num-gpus", "16", "--seq-len", "4096",
            "--global-batch", "64", "--tp", "2", "--pp", "2",
            "--overlap-moe-expert-parallel-comm",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1
    assert "needs expert parallelism, got ep (1)" in out
    assert "needs a virtual pipeline when pp > 1, got pp (2), vpp (1)" in out
    ok = main(
        [
            "estimate", "--model", "mixtral-8x7b", "--num-gpus", "16", "--seq-len", "4096",
            "--global-batch", "64", "--tp", "2", "--ep", "4",
            "--overlap-moe-expert-parallel-comm",
        ]
    )  # fmt: skip
    assert ok == 0


def test_cudnn_norm_moves_an_fp8_step_by_recipe(capsys):
    """MXFP8's norm output is quantized inside cuDNN's norm (faster step); current scaling
    loses the norm's amax (slower); memory stays."""
    fp8 = ["--hardware", "b200", "--precision", "fp8", "--tp", "2", "--sp"]

    def run(recipe: str, *extra: str) -> dict:
        return estimate_json(capsys, *fp8, "--fp8-recipe", recipe, *extra)

    mxfp8, mxfp8_cudnn = run("mxfp8"), run("mxfp8", "--cudnn-norm")
    current, current_cudnn = run("tensorwise"), run("tensorwise", "--cudnn-norm")
    assert mxfp8_cudnn["iteration_time_s"] < mxfp8["iteration_time_s"]
    assert current_cudnn["iteration_time_s"] > current["iteration_time_s"]
    assert mxfp8_cudnn["memory"] == mxfp8["memory"]


MOE_BASE = ["--model", "qwen3-30b-a3b", "--num-gpus", "16", "--seq-len", "4096"]
MOE_BASE += ["--global-batch", "64", "--ep", "8"]
TE_ROUTER = ["--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "attn", "moe_router"]


@pytest.mark.parametrize(
    ("argv", "rules"),
    [
        (["--recompute", "full", "--cuda-graph-impl", "local"], {"cuda_graph_full_recompute"}),
        (
            ["--recompute", "selective", "--recompute-modules", "moe", *TE_ROUTER],
            {"cuda_graph_moe_recompute"},
        ),
        (["--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "mlp"],
         {"cuda_graph_scopes_match_model"}),
    ],
)  # fmt: skip
def test_estimate_lists_what_megatron_refuses_of_cuda_graphs(capsys, argv, rules) -> None:
    # these plans were priced, and their launch lines failed in TransformerConfig
    code = estimate.run(parse_estimate(MOE_BASE, *argv, "--json"))
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and {v["rule"] for v in data["violations"]} == rules


def test_a_scope_set_megatron_refuses_exits_2(capsys) -> None:
    graphs = ["--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "moe_preprocess"]
    assert main(["estimate", *MOE_BASE, *graphs]) == 2
    assert "only with moe_router" in capsys.readouterr().err
