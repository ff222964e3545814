"""Start-up of the command line: ``--help`` of every command, and every command up to the
point where it needs the search, the cost model or the executor, load none of the heavy
libraries (pandas, numpy, networkx, matplotlib, scipy, torch).

Each case runs in a fresh interpreter, whose ``sys.modules`` then says what was imported.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from paraplan.commands import COMMAND_HELP

HEAVY = ("matplotlib", "networkx", "numpy", "pandas", "scipy", "torch")
"""Libraries that take tenths of a second to seconds to import."""

PROBLEM = ["--model", "llama3-8b", "--num-gpus", "8", "--seq-len", "4096", "--global-batch", "64"]

SCRIPT = """
import contextlib, io, json, sys
from paraplan.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(json.loads(sys.argv[1]))
    except SystemExit as exc:
        code = exc.code
heavy = json.loads(sys.argv[2])
print(json.dumps({"code": code, "loaded": sorted(m for m in heavy if m in sys.modules)}))
"""


def run_fresh(argv: list[str]) -> tuple[int, list[str]]:
    """(exit code, the `HEAVY` modules loaded) of `paraplan argv...` in a new interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(argv), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    return int(result["code"] or 0), result["loaded"]


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["--version"], *([name, "--help"] for name in COMMAND_HELP)],
    ids=lambda argv: " ".join(argv),
)
def test_help_loads_no_heavy_library(argv: list[str]) -> None:
    code, loaded = run_fresh(argv)
    assert code == 0 and loaded == []


@pytest.mark.parametrize(
    ("argv", "expected_code"),
    [
        (["check", *PROBLEM, "--tp", "2"], 0),
        (["check", *PROBLEM, "--tp", "3"], 1),
        (["estimate", *PROBLEM, "--tp", "3"], 1),
        (["plan", *PROBLEM[:1], "no-such-model", *PROBLEM[2:]], 2),
        (["plan", *PROBLEM, "--hardware", "no-such-profile"], 2),
        (["plan", *PROBLEM[:2], "--seq-len", "4096", "--global-batch", "64"], 2),
        (["execute", "no-such-plan.json"], 2),
        (["report", "no-such-run"], 2),
        (["calibrate", "no-such-run", "-o", "calibrated.json"], 2),
        (["demo", "--model", "no-such-model"], 2),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else str(v),
)
def test_commands_answer_before_the_search_without_heavy_libraries(
    argv: list[str], expected_code: int
) -> None:
    code, loaded = run_fresh(argv)
    assert code == expected_code and loaded == []


def test_a_priced_plan_loads_the_cost_model() -> None:
    # the check above sees imports: pricing a plan does load the cost model's libraries
    # (pandas; the group placements are arithmetic, networkx serves the calibration graph)
    code, loaded = run_fresh(["estimate", *PROBLEM, "--tp", "2"])
    assert code == 0 and "pandas" in loaded and "networkx" not in loaded
