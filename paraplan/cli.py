"""Entry point of the `paraplan` command.

Exit codes: 0 success; 1 the answer is "no" (an invalid plan, nothing fits); 2 bad input
(unknown model, malformed JSON, a value out of range), reported as one line on stderr,
never as a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from paraplan.commands import (
    calibrate,
    check,
    demo,
    estimate,
    execute,
    export,
    models,
    plan,
    profile,
    report,
)
from specs.errors import SpecError

COMMANDS: tuple[ModuleType, ...] = (
    demo,
    models,
    check,
    profile,
    estimate,
    plan,
    export,
    execute,
    report,
    calibrate,
)
"""Subcommands in the order `paraplan --help` lists them."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"paraplan {self.prog.split()[-1]}: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, one subparser per command module."""
    parser = _Parser(
        prog="paraplan",
        description="Plan, execute and compare parallel transformer training.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        sp = sub.add_parser(command.NAME, help=command.HELP, description=command.HELP)
        command.add_arguments(sp)
        sp.set_defaults(_run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args))
    except SpecError as exc:
        sys.stderr.write(f"paraplan {args.command}: error: {exc}\n")
        return 2
    except BrokenPipeError:
        # the reader of our stdout (e.g. `| head`) went away: not an error of ours
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        sys.stderr.write(f"paraplan {args.command}: interrupted\n")
        return 130
