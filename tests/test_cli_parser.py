"""The `servesim` argument parser: a run builds only its subcommand's parsers, and parses,
helps and fails exactly as the parser of every subcommand does."""

from __future__ import annotations

import argparse

import pytest

from servesim.cli import _COMMANDS, _parser

ARGVS = [
    ["predict", "-c", "x.yaml", "--set", "a=1", "--set", "b=2", "--format", "json", "--capture-per-request"],
    ["recommend", "-c", "x.yaml", "--executor", "ray"], ["validate", "--runs", "1,2"],
    ["calibrate", "-c", "x.yaml", "-m", "m.jsonl", "-o", "cal.yaml"], ["data", "fetch", "--gpu", "h200_sxm"],
    ["data", "timing-cache", "--clear"], ["compare", "a", "b", "--label", "x", "--sla-ttft-ms", "300"],
    # help
    ["predict", "-h"], ["recommend", "--help"], ["validate", "-h"], ["calibrate", "-h"], ["data", "-h"],
    ["data", "fetch", "-h"], ["compare", "-h"],
    # usage errors
    ["predict"], ["predict", "-c"], ["predict", "-c", "x.yaml", "--bogus"], ["predict", "-c", "x.yaml", "extra"],
    ["predict", "-c", "x.yaml", "--format", "xml"], ["recommend"], ["calibrate", "-c", "x.yaml"], ["data"],
    ["data", "nope"], ["compare"], ["compare", "a", "--sla-itl-ms", "fast"],
]


def _outcome(parser: argparse.ArgumentParser, argv: list[str], capsys) -> tuple[object, str, str]:
    """What parsing `argv` gives: the namespace or the exit code, and what it printed."""
    try:
        result: object = vars(parser.parse_args(argv))
    except SystemExit as exc:
        result = exc.code
    out, err = capsys.readouterr()
    return result, out, err


@pytest.mark.parametrize("argv", ARGVS, ids=" ".join)
def test_a_subcommand_parses_as_with_every_subcommand_built(argv, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    everything = _outcome(_parser([]), argv, capsys)
    assert _outcome(_parser(argv), argv, capsys) == everything


@pytest.mark.parametrize("command", sorted(_COMMANDS))
def test_a_run_builds_only_the_parsers_of_its_module(command):
    subparsers = next(a for a in _parser([command])._actions if isinstance(a, argparse._SubParsersAction))
    same_module = {name for name, module in _COMMANDS.items() if module == _COMMANDS[command]}
    assert set(subparsers.choices) == same_module


@pytest.mark.parametrize("argv", [[], ["-h"], ["--help"], ["nope"], ["-h", "predict"], ["--", "predict"]])
def test_help_and_unknown_commands_build_every_subcommand(argv):
    subparsers = next(a for a in _parser(argv)._actions if isinstance(a, argparse._SubParsersAction))
    assert list(subparsers.choices) == list(_COMMANDS)
