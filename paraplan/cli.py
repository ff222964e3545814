"""Entry point of the `paraplan` command.

Exit codes: 0 success; 1 the answer is "no" (an invalid plan, nothing fits); 2 bad input
(unknown model, malformed JSON, a value out of range), reported as one line on stderr,
never as a traceback.

A subcommand's module (and what it imports: the cost model, torch for `execute` and `demo`)
is loaded only when that subcommand runs; `paraplan --help` and `paraplan --version` load none.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import itertools
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from launch.failures import LaunchInterrupted
from paraplan.commands import COMMAND_HELP
from paraplan.fix_flags import cli_fix
from paraplan.flags import name_flags
from specs.errors import SpecError

PROG = "paraplan"


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2; a subcommand's
    parser names a flag it does not take before any other error (argparse would first
    report the required flag that a misspelt one was meant to give)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if args is not None and self._subparsers is None:
            unknown = unknown_flags(self, args)
            if unknown:
                self.error(
                    f"unrecognized arguments: {', '.join(unknown)} "
                    f"(`{self.prog} --help` lists the flags)"
                )
        return super().parse_known_args(args, namespace)


def unknown_flags(parser: argparse.ArgumentParser, args: Sequence[str]) -> list[str]:
    """The ``--flag`` options of ``args`` that no flag of ``parser`` starts with (argparse
    takes a unique prefix of a flag), each with the closest flag where one is close:
    ``--global-bach (did you mean --global-batch?)``. Arguments after ``--`` are values."""
    flags = [s for action in parser._actions for s in action.option_strings]
    unknown = []
    for arg in itertools.takewhile(lambda a: a != "--", args):
        name = arg.split("=", 1)[0]
        if not name.startswith("--") or any(f.startswith(name) for f in flags):
            continue
        close = difflib.get_close_matches(name, flags, n=1, cutoff=0.8)
        unknown.append(f"{arg} (did you mean {close[0]}?)" if close else arg)
    return unknown


class _VersionAction(argparse.Action):
    """``--version``: looks the installed version up only when asked (the lookup scans the
    installed distributions, which every other command can skip)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the installed version and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from specs.version import paraplan_version

        sys.stdout.write(f"{PROG} {paraplan_version() or 'unknown (not installed)'}\n")
        parser.exit()


def command_module(name: str) -> ModuleType:
    """The module of subcommand ``name`` (one of `COMMAND_HELP`), imported on first use."""
    return importlib.import_module(f"paraplan.commands.{name}")


def selected_command(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv``: its first argument that is not an option."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMAND_HELP else None


def build_parser(commands: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser; the flags of ``commands`` (default: all) are added, the other
    subcommands are listed with their help only."""
    parser = _Parser(
        prog=PROG,
        description="Plan, execute and compare parallel transformer training.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    loaded = COMMAND_HELP if commands is None else commands
    for name, text in COMMAND_HELP.items():
        sp = sub.add_parser(name, help=text, description=text)
        if name in loaded:
            module = command_module(name)
            module.add_arguments(sp)
            sp.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = selected_command(argv)
    args, unknown = build_parser(() if command is None else (command,)).parse_known_args(argv)
    if unknown:  # argparse would blame the top-level parser: name the command and its help
        sys.stderr.write(
            f"{PROG} {args.command}: error: unrecognized arguments: {' '.join(unknown)} "
            f"(`{PROG} {args.command} --help` lists the flags)\n"
        )
        return 2
    try:
        return int(args._run(args))
    except SpecError as exc:
        message = name_flags(cli_fix(str(exc)), args)
        sys.stderr.write(f"{PROG} {args.command}: error: {message}\n")
        return 2
    except BrokenPipeError:
        # the reader of our stdout (e.g. `| head`) went away: not an error of ours
        sys.stderr.close()
        return 0
    except LaunchInterrupted as exc:  # SIGINT or SIGTERM while ranks ran: 130 or 143
        sys.stderr.write(f"{PROG} {args.command}: {exc.headline()}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG} {args.command}: interrupted\n")
        return 130


if __name__ == "__main__":  # `python -m paraplan.cli` runs the command line as `python -m paraplan`
    raise SystemExit(main())
