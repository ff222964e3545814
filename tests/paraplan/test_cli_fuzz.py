"""Property tests of the command line's contract (docs/cli.md, exit codes) over the flag
space of `paraplan estimate` and `paraplan plan`: every command line ends in an answer,
exit 0 with a result, 1 with the rules a plan breaks (or, for `plan`, nothing that fits), or
2 with one `paraplan <command>: error: ...` line, and never in a Python exception.

The strategies are in `tests/paraplan/cli_strategies.py`. For a longer run, scale the
examples of every property: ``CLIFUZZ_SCALE=30 pytest tests/paraplan/test_cli_fuzz.py``
(with ``--hypothesis-seed N`` for another draw)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os

import pytest
from hypothesis import HealthCheck, example, given, settings

from paraplan.cli import build_parser
from specs.presets import get_preset
from tests.paraplan.cli_helpers import exit_code
from tests.paraplan.cli_strategies import estimate_argv, flag_values, plan_argv

PYTHON_ERRORS = ("Traceback", "NoneType", "object has no attribute", "division by zero")
"""Texts of a Python exception that must not reach a user's `error:` line."""

SCALE = int(os.environ.get("CLIFUZZ_SCALE", "1"))


def examples(n: int) -> settings:
    """``n`` examples (times ``CLIFUZZ_SCALE``), no deadline: one estimate takes from a few
    milliseconds to a second, a search a few seconds."""
    return settings(
        max_examples=n * SCALE,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``paraplan ARGV`` run in-process (captured here: pytest's
    ``capsys`` is not reset between hypothesis examples); an exception other than argparse's
    `SystemExit` propagates and fails the property."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = exit_code(argv)
    return code, out.getvalue(), err.getvalue()


def assert_refusal(command: str, out: str, err: str) -> None:
    """Exit 2: one `error:` line on stderr (after any progress and note lines) naming the problem,
    nothing on stdout, no Python exception text."""
    notes = ("progress: ", f"paraplan {command}: note: ")
    lines = [ln for ln in err.splitlines() if not ln.startswith(notes)]
    assert len(lines) == 1, err
    assert lines[0].startswith((f"paraplan {command}: error: ", "paraplan: error: ")), err
    assert len(lines[0].split("error: ", 1)[1].strip()) > 10, err
    assert not any(text in err for text in PYTHON_ERRORS), err
    assert out == "", out


def assert_estimate(est: dict, model: str) -> None:
    """One estimate's JSON: positive finite time and memory, no negative part, MFU at most
    HFU, and HFU at most 1 but for DeepSeek sparse attention, whose core MFU and HFU count
    as dense causal attention, above the work done past the top-k (docs/cost-model.md)."""
    for key in ("iteration_time_s", "tokens_per_s", "peak_memory_gib", "flops_per_iteration"):
        assert math.isfinite(est[key]) and est[key] > 0, (key, est[key])
    assert 0 < est["mfu"] <= est["hfu"], (est["mfu"], est["hfu"])
    assert est["hfu"] <= 1 or get_preset(model).uses_dsa, est["hfu"]
    for phase, seconds in est["breakdown"].items():
        assert math.isfinite(seconds) and seconds >= 0, (phase, seconds)
    for stage in est["memory"]:
        for part, gib in stage["parts"].items():
            assert math.isfinite(gib) and gib >= 0, (stage["stage"], part, gib)
    peak = max(stage["total_gib"] for stage in est["memory"])
    assert math.isclose(peak, est["peak_memory_gib"], rel_tol=1e-9)


def model_name(argv: list[str]) -> str:
    return argv[argv.index("--model") + 1]


def assert_violations(data: dict) -> None:
    assert data["valid"] is False and data["violations"], data
    for violation in data["violations"]:
        assert violation["rule"] and len(violation["message"]) > 10, violation


def answer(command: str, argv: list[str]) -> tuple[int, dict] | None:
    """Exit code and JSON of ``argv``; None after checking an exit-2 refusal."""
    code, out, err = run_cli(argv)
    assert code in (0, 1, 2), (code, out, err)
    if code == 2:
        assert_refusal(command, out, err)
        return None
    return code, json.loads(out)


def check_estimate(argv: list[str]) -> None:
    if (result := answer("estimate", argv)) is None:
        return
    code, data = result
    if code == 1:
        assert_violations(data)
    else:
        assert_estimate(data, model_name(argv))


def check_plan(argv: list[str]) -> None:
    if (result := answer("plan", argv)) is None:
        return
    code, data = result
    if code == 1:
        assert data["best"] is None and not data["top"], data
        for closest in data.get("closest", []):
            assert_estimate(closest, model_name(argv))
        return
    assert_estimate(data["best"], model_name(argv))
    assert data["best"]["fits"] is True


LLAMA2_13B = [
    "--model",
    "llama2-13b",
    "--num-gpus",
    "16",
    "--seq-len",
    "4096",
    "--global-batch",
    "8",
]


@examples(150)
@given(argv=estimate_argv())
# a layout repeat of 10^11 layers: a MemoryError while the string was built
@example(
    ["estimate", *LLAMA2_13B, "--pipeline-model-parallel-layout", "(t)*99999999999|L", "--json"]
)
@example(
    ["estimate", *LLAMA2_13B, "--pipeline-model-parallel-layout", "E|t*" + "9" * 5000, "--json"]
)
# --pp 0 beside --num-layers-per-virtual-pipeline-stage: a ZeroDivisionError
@example(
    ["estimate", *LLAMA2_13B, "--pp", "0", "--num-layers-per-virtual-pipeline-stage", "1", "--json"]
)
def test_estimate_answers_every_command_line(argv: list[str]) -> None:
    check_estimate(argv)


@examples(150)
@given(argv=estimate_argv(max_flags=2))
def test_estimate_with_few_flags_answers(argv: list[str]) -> None:
    # few flags: more command lines pass the rules and reach the cost model
    check_estimate(argv)


@examples(8)
@given(argv=plan_argv(max_gpus=512))
# sparse attention needs SP at tp > 1, which 48,625 tokens cannot take: an IndexError
@example(
    [
        "plan",
        *("--model", "glm-5.2", "--hardware", "b300", "--num-gpus", "96", "--seq-len", "48625"),
        *("--global-batch", "256", "--precision", "fp32", "--json", "--top", "1", "--max-mbs", "2"),
    ]
)
# a note on 1,279 GPUs (no whole nodes) before the error line of --cp 0
@example(
    [
        "plan",
        *("--model", "gpt-39.1b", "--hardware", "h800-sxm-80gb", "--num-gpus", "1279"),
        *("--seq-len", "12548", "--global-batch", "40928", "--cp", "0", "--json"),
    ]
)
def test_plan_answers_every_command_line(argv: list[str]) -> None:
    check_plan(argv)


@pytest.mark.slow
@examples(200)
@given(argv=plan_argv())
def test_plan_answers_every_command_line_up_to_4096_gpus(argv: list[str]) -> None:
    check_plan(argv)


def test_the_strategies_draw_every_flag_of_estimate() -> None:
    # a flag added to `paraplan estimate` without a strategy here goes unfuzzed
    parser = build_parser(("estimate",))
    sub = next(a for a in parser._actions if a.dest == "command").choices["estimate"]
    drawn = set(flag_values(get_preset("tiny"), 8)) | {"--attention"}
    problem = {"--model", "--hardware", "--num-gpus", "--seq-len", "--global-batch", "--precision"}
    for action in sub._actions:
        names = set(action.option_strings)
        if names and not names & {"-h", "--json"}:
            assert names & (drawn | problem), sorted(names)
