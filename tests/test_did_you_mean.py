"""Unknown catalog names get a 'did you mean' hint (issue 18); the name is never silently replaced."""

from __future__ import annotations

import pytest

from conftest import assert_one_clear_error
from windtunnel.specs.errors import did_you_mean


def test_hints_forgive_case_separators_suffixes_and_typos():
    values = ["deepseek-v3", "llama3-405b", "llama3-8b", "h100-sxm", "h100-hbm2e-500w", "gb200"]
    assert did_you_mean("deepseek_v3", values) == " - did you mean 'deepseek-v3'?"
    assert did_you_mean("Llama3-8B", values) == " - did you mean 'llama3-8b'?"
    assert did_you_mean("llama3-450b", values) == " - did you mean 'llama3-405b'?"
    assert did_you_mean("h100", values) == " - did you mean 'h100-hbm2e-500w' or 'h100-sxm'?"
    assert did_you_mean("tpu-v5p", values) == ""


@pytest.mark.parametrize("option,value,hint", [("--model", "deepseek_v3", "'deepseek-v3'"),
                                               ("--hardware", "H100-SXM", "'h100-sxm'"),
                                               ("--framework", "Megatron_LM", "'megatron-lm'")])
def test_cli_names_the_close_value_and_still_fails(cli, option, value, hint):
    args = {"--model": "llama3-8b", "--hardware": "h100-sxm", "--framework": "megatron"}
    args[option] = value
    proc = cli("train", "simulate", "--model", args["--model"], "--hardware", args["--hardware"], "--framework",
               args["--framework"], "--devices", "8", "--seq-len", "2048", "--global-batch", "8", "--plan", "tp=1")
    assert_one_clear_error(proc, value, "did you mean " + hint)


def test_train_simulate_refuses_two_plans(cli):
    proc = cli("train", "simulate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--seq-len",
               "2048", "--global-batch", "8", "--plan", "tp=1", "--plan", "tp=2")
    assert_one_clear_error(proc, "'--plan'", "compare train")
