"""Repeated options (issue 18 item 1): on every verb, a single-valued option given twice is one clear error;
options that compare or accumulate (compare train --plan, --what-if, --pin) repeat. And `--version`."""

from __future__ import annotations

import pytest
import typer

from conftest import assert_one_clear_error
from windtunnel import __version__
from windtunnel.cli.app import app
from windtunnel.cli.root import repeated_options


def _verbs(command, path=()):
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from _verbs(sub, (*path, name))
    else:
        yield path, command


ROOT = typer.main.get_command(app)
VERBS = list(_verbs(ROOT))


def test_every_single_valued_option_of_every_verb_is_refused_twice():
    checked = 0
    for path, command in VERBS:
        for param in command.params:
            opts = getattr(param, "opts", [])
            if not opts or getattr(param, "is_flag", False) or not opts[0].startswith("--"):
                continue
            tokens = [*path, opts[0], "a", f"{opts[0]}=b"]
            found = repeated_options(ROOT, tokens)
            if getattr(param, "multiple", False):
                assert found is None, (path, opts[0])
            else:
                assert found == (opts[0], ["a", "b"], " ".join(path)), (path, opts[0])
                checked += 1
    assert checked > 150  # every verb's options, not a sample


def test_values_that_look_like_options_are_values():
    tokens = ["infer", "simulate", "--model", "--traffic", "--traffic", "poisson:rate=1"]
    assert repeated_options(ROOT, tokens) is None  # '--traffic' is the model's (odd) value, then one --traffic


@pytest.mark.parametrize("argv,option", [
    (["train", "simulate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--hardware", "b200", "--devices", "8",
      "--global-batch", "8"], "--hardware"),
    (["train", "search", "--model", "llama3-8b", "--model", "llama3-70b", "--hardware", "h100-sxm", "--devices", "8",
      "--global-batch", "8"], "--model"),
    (["infer", "simulate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--deployment", "mixed:tp=1",
      "--deployment", "mixed:tp=2", "--traffic", "poisson:rate=1,input=100,output=10"], "--deployment"),
    (["infer", "search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--traffic",
      "poisson:rate=1,input=100,output=10", "--traffic=poisson:rate=2,input=100,output=10"], "--traffic"),
    (["avail", "simulate", "--devices", "1024", "--checkpoint-every", "30min", "--checkpoint-every", "1h"],
     "--checkpoint-every"),
    (["train", "job", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--tokens", "1T",
      "--global-batch", "8", "--faults", "catalog:meta-rsc1", "--faults", "catalog:llama3-54day"], "--faults"),
])
def test_cli_refuses_repeats(cli, argv, option):
    proc = cli(*argv)
    assert_one_clear_error(proc, f"'{option}'", "2 times")


def test_compare_hint_for_train_simulate_hardware(cli):
    proc = cli("train", "simulate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--hardware", "b200",
               "--devices", "8", "--global-batch", "8")
    assert_one_clear_error(proc, "compare train --hardware")


def test_version(cli):
    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"windtunnel {__version__}"
