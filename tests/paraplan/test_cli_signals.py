"""The exit code and the one line of a command interrupted while its ranks ran
(`paraplan.cli.main`): 130 for SIGINT, 143 for SIGTERM, naming the signal; Ctrl-C outside
a launch stays 130 with ``interrupted``."""

from __future__ import annotations

import argparse

import pytest

from launch.failures import LaunchInterrupted
from paraplan.cli import main
from paraplan.commands import profile


@pytest.mark.parametrize(
    ("signal_name", "code", "line"),
    [
        ("SIGINT", 130, "interrupted by SIGINT (Ctrl-C); the launcher stopped every rank"),
        ("SIGTERM", 143, "interrupted by SIGTERM; the launcher stopped every rank"),
    ],
)
def test_an_interrupted_launch_exits_with_its_signals_code_and_names_it(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    signal_name: str,
    code: int,
    line: str,
) -> None:
    def interrupted(args: argparse.Namespace) -> int:
        raise LaunchInterrupted(signal_name)

    monkeypatch.setattr(profile, "run", interrupted)
    assert main(["profile", "--quick", "--out", "p.json"]) == code
    captured = capsys.readouterr()
    assert captured.err == f"paraplan profile: {line}\n" and captured.out == ""


def test_ctrl_c_outside_a_launch_is_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def ctrl_c(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(profile, "run", ctrl_c)
    assert main(["profile", "--quick", "--out", "p.json"]) == 130
    assert capsys.readouterr().err == "paraplan profile: interrupted\n"
