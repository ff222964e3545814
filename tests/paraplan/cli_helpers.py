"""Shared helpers of the command-line tests: run the command line, parse and run
``paraplan estimate``."""

from __future__ import annotations

import argparse
import json

import pytest

from paraplan.cli import main
from paraplan.commands import estimate


def parse_estimate(base: list[str], *argv: str) -> argparse.Namespace:
    """``paraplan estimate`` arguments: ``base`` then ``argv``."""
    parser = argparse.ArgumentParser(prog="paraplan estimate")
    estimate.add_arguments(parser)
    return parser.parse_args([*base, *argv])


def run_estimate_json(capsys: pytest.CaptureFixture[str], base: list[str], *argv: str) -> dict:
    """The JSON ``paraplan estimate`` prints for ``base`` and ``argv`` (exit status 0)."""
    assert estimate.run(parse_estimate(base, *argv, "--json")) == 0
    return json.loads(capsys.readouterr().out)


def exit_code(argv: list[str]) -> int:
    """The exit code of ``paraplan ARGV`` run through the CLI's `main`, argparse's usage
    errors (`SystemExit`) included; any other exception propagates."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The exit code, stdout and stderr of ``paraplan ARGV`` run through the CLI's `main`."""
    code = exit_code(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
