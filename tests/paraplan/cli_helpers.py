"""Shared helpers of the command-line tests: parse and run ``paraplan estimate``."""

from __future__ import annotations

import argparse
import json

import pytest

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
