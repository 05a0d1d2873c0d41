"""The planning CLI's cost and cluster flags come from the FCP option table: same parse, same help, same values."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from mindspeed_mm.core.fcp.cli import build_parser
from mindspeed_mm_fcp.options import FCP_OPTIONS, FCPOption, FCPOptionError, add_cli_argument, coerce_option

COMMANDS = ("plan", "simulate")
CLI_OPTIONS = tuple(option for option in FCP_OPTIONS if option.cli_flag is not None)
VALID = {
    "fcp_preset": "a3-qwen3vl-8b",
    "fcp_profile_table": "tables/measured.json",
    "fcp_max_tokens_per_rank": "30000",
    "fcp_ranks_per_node": "8",
    "fcp_max_degree": "16",
    "fcp_communicator_budget": "12",
}
"""One accepted value per CLI option."""
INVALID = {
    "fcp_preset": (" ",),
    "fcp_profile_table": (" ",),
    "fcp_max_tokens_per_rank": ("0", "-5", "x", "1.5"),
    "fcp_ranks_per_node": ("0", "x"),
    "fcp_max_degree": ("0", "x"),
    "fcp_communicator_budget": ("0", "-1", "x"),
}
"""Values the option's parse refuses (argparse's plain int or str would take most of them)."""
CLI_CONVERSIONS = {"fcp_profile_table": Path}
"""Options whose CLI value is converted after the shared parse."""

cases = pytest.mark.parametrize("command", COMMANDS)
each_option = pytest.mark.parametrize("option", CLI_OPTIONS, ids=lambda option: option.dest)


def parse(command: str, *argv: str) -> argparse.Namespace:
    """The namespace `fcp <command> <argv>` parses to."""
    return build_parser().parse_args([command, *argv])


def help_entry(help_text: str, flag: str) -> str:
    """The entry of `flag` in a --help output (from its line to the next flag's), whitespace collapsed."""
    entry: list[str] = []
    for line in help_text.splitlines():
        starts_a_flag = line.lstrip().startswith("-")
        if entry and starts_a_flag:
            break
        if entry or (starts_a_flag and line.split()[0] == flag):
            entry.append(line)
    assert entry, f"{flag} is not in the help"
    return " ".join(" ".join(entry).split())


def cli_value(option: FCPOption, text: str) -> Any:
    """The value the CLI should keep for `text`: the shared coercion, converted where the CLI converts."""
    value = coerce_option(option.dest, text)
    convert = CLI_CONVERSIONS.get(option.dest)
    return convert(value) if convert is not None else value


def test_the_cli_flags_and_dests_are_the_commands_names() -> None:
    assert {option.dest: (option.cli_flag, option.cli_dest) for option in CLI_OPTIONS} == {
        "fcp_preset": ("--preset", "preset"),
        "fcp_profile_table": ("--profile", "profile"),
        "fcp_max_tokens_per_rank": ("--max-tokens-per-rank", "max_tokens_per_rank"),
        "fcp_ranks_per_node": ("--ranks-per-node", "ranks_per_node"),
        "fcp_max_degree": ("--max-degree", "max_degree"),
        "fcp_communicator_budget": ("--communicator-budget", "communicator_budget"),
    }
    assert set(VALID) == set(INVALID) == {option.dest for option in CLI_OPTIONS}


@cases
@each_option
def test_a_cli_value_equals_the_coerced_option(command: str, option: FCPOption) -> None:
    text = VALID[option.dest]
    value = getattr(parse(command, option.cli_flag, text), option.cli_dest)
    assert value == cli_value(option, text)
    assert type(value) is type(cli_value(option, text))


def test_profile_stays_a_path() -> None:
    assert parse("plan", "--profile", "t.json").profile == Path("t.json")


@cases
def test_cli_defaults_are_unset(command: str) -> None:
    args = parse(command)
    assert {option.cli_dest: getattr(args, option.cli_dest) for option in CLI_OPTIONS} == dict.fromkeys(
        (option.cli_dest for option in CLI_OPTIONS), None)


@cases
@each_option
def test_a_value_the_option_refuses_is_a_usage_error(command: str, option: FCPOption,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    for text in INVALID[option.dest]:
        with pytest.raises(FCPOptionError) as coerced:
            coerce_option(option.dest, text)
        with pytest.raises(SystemExit) as stop:
            parse(command, f"{option.cli_flag}={text}")
        assert stop.value.code == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"argument {option.cli_flag}" in err
        assert str(coerced.value).split(": ", 1)[1] in err


@cases
@each_option
def test_help_shows_the_options_help(command: str, option: FCPOption, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit):
        parse(command, "--help")
    assert " ".join(option.help.split()) in help_entry(capsys.readouterr().out, option.cli_flag)


@cases
def test_preset_and_profile_exclude_each_other(command: str) -> None:
    with pytest.raises(SystemExit):
        parse(command, "--preset", VALID["fcp_preset"], "--profile", VALID["fcp_profile_table"])


def test_an_option_without_a_cli_flag_is_refused() -> None:
    with pytest.raises(ValueError, match="fcp_attention_algo"):
        add_cli_argument(argparse.ArgumentParser(), "fcp_attention_algo")
