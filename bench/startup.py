"""Start-up time of the command line: wall seconds of commands that answer before any search,
against a bare interpreter (``python -c pass``).

Each command runs ``--repeat`` times in a fresh interpreter (``python -m paraplan ...``, the
same interpreter as this script); the median wall time is printed with its ratio to the
median of ``python -c pass``, and the heavy libraries the command loaded (pandas, numpy,
networkx, matplotlib, scipy, torch; none is the target). Target: every command under 1 s,
``--help`` within a few times a bare interpreter.

Run: ``python bench/startup.py [--repeat N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

PROBLEM = ["--model", "llama3-70b", "--num-gpus", "64", "--seq-len", "8192", "--global-batch", "64"]
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--help",),
    ("--version",),
    ("plan", "--help"),
    ("estimate", "--help"),
    ("execute", "--help"),
    ("demo", "--help"),
    ("calibrate", "--help"),
    ("check", *PROBLEM, "--tp", "8", "--pp", "4"),
    ("plan", "--model", "no-such-model", *PROBLEM[2:]),
)
"""``paraplan`` arguments timed: every command's help that loads the most, a valid check, and
`plan` with bad input (answered before the search starts)."""
HEAVY = ("matplotlib", "networkx", "numpy", "pandas", "scipy", "torch")
"""Libraries that take tenths of a second to seconds to import."""
PROBE = (
    "import runpy, sys\n"
    "sys.argv = ['paraplan', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('paraplan', run_name='__main__')\n"
    "except SystemExit:\n"
    "    pass\n"
    f"sys.stderr.write('heavy:' + ' '.join(m for m in {HEAVY!r} if m in sys.modules) + '\\n')\n"
)
"""Runs `paraplan` as ``python -m paraplan`` does, then names the heavy libraries it loaded."""


def wall_s(argv: list[str]) -> tuple[float, list[str]]:
    """Wall seconds of one run of ``argv`` and the heavy libraries its `PROBE` line names."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    probe = [line for line in done.stderr.splitlines() if line.startswith("heavy:")]
    return elapsed, probe[-1].removeprefix("heavy:").split() if probe else []


def median_s(argv: list[str], repeat: int) -> tuple[float, list[str]]:
    """Median wall seconds over ``repeat`` runs, and the heavy libraries of the last run."""
    runs = [wall_s(argv) for _ in range(repeat)]
    return statistics.median(t for t, _ in runs), runs[-1][1]


def measure(repeat: int) -> dict[str, object]:
    """``{"python_s", "commands": [{"command", "wall_s", "ratio", "heavy"}]}``."""
    bare_s, _ = median_s([sys.executable, "-c", "pass"], repeat)
    rows = []
    for args in COMMANDS:
        seconds, loaded = median_s([sys.executable, "-c", PROBE, *args], repeat)
        rows.append(
            {
                "command": "paraplan " + " ".join(args),
                "wall_s": seconds,
                "ratio": seconds / bare_s,
                "heavy": loaded,
            }
        )
    return {"python_s": bare_s, "repeat": repeat, "commands": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per command (median)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    result = measure(max(1, args.repeat))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"python -c pass: {result['python_s']:.3f} s (median of {args.repeat})")
    print(f"{'command':<64} {'wall s':>7} {'x bare':>7}  heavy libraries loaded")
    for row in result["commands"]:  # type: ignore[union-attr]
        command = row["command"] if len(row["command"]) <= 64 else row["command"][:61] + "..."
        heavy = ", ".join(row["heavy"]) or "none"
        print(f"{command:<64} {row['wall_s']:>7.3f} {row['ratio']:>7.1f}  {heavy}")


if __name__ == "__main__":
    main()
