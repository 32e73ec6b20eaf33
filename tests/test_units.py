"""Units are never guessed (issue 18 item 2): on every option and spec string that takes a quantity, a bare
number is one clear error naming the field and the accepted units; the same quantity with its unit is
accepted. Impossible combinations (checkpoint cost >= interval, an SLO below one iteration) warn in text and
in the JSON ``warnings`` list."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from windtunnel.cli.app import app
from windtunnel.specs.errors import WindtunnelError

TRAIN = ["--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "64", "--global-batch", "256"]
TRAFFIC = "poisson:rate=2,input=512,output=64"
SERVE = ["--model", "llama3-8b", "--hardware", "h100-sxm", "--traffic", TRAFFIC]
AVAIL = ["--devices", "1024"]
DURATION_UNITS = ("ms", "s", "min", "h")


def invoke(*argv: str):
    return CliRunner().invoke(app, list(argv))


def refused(argv: list[str], field: str, units=DURATION_UNITS) -> str:
    result = invoke(*argv)
    assert isinstance(result.exception, WindtunnelError), (argv, result.exit_code, result.output, result.exception)
    text = str(result.exception)
    assert field in text and all(unit in text for unit in units), text
    assert "\n" not in text  # one paragraph
    return text


# (argv with a bare number, field named in the error, the same with a unit: accepted)
CASES = [
    *[(["avail", verb, *AVAIL, f"--{opt}", "30"], opt, ["avail", verb, *AVAIL, f"--{opt}", "30min"])
      for verb in ("simulate", "markov") for opt in ("checkpoint-every", "repair", "detect", "restart", "step-time")],
    (["avail", "simulate", *AVAIL, "--checkpoint-cost", "60"], "checkpoint-cost", None),
    (["avail", "simulate", *AVAIL, "--checkpoint-async", "--checkpoint-stall", "5"], "checkpoint-stall", None),
    (["avail", "simulate", *AVAIL, "--horizon", "54"], "horizon", None),
    (["avail", "simulate", *AVAIL, "--timeline-bin", "60", "--timeline", "/dev/null"], "timeline-bin", None),
    (["avail", "optimize", *AVAIL, "--checkpoint-every", "1800"], "checkpoint-every", None),
    (["avail", "target", *AVAIL, "--restart", "600"], "restart", None),
    (["avail", "checkpoint-interval", "--mtbf", "24", "--checkpoint-cost", "5min"], "mtbf",
     ["avail", "checkpoint-interval", "--mtbf", "24h", "--checkpoint-cost", "5min"]),
    (["avail", "checkpoint-interval", "--mtbf", "24h", "--checkpoint-cost", "300"], "checkpoint-cost", None),
    (["avail", "checkpoint-interval", "--mtbf", "24h", "--checkpoint-cost", "5min", "--restart", "600"], "restart",
     None),
    (["avail", "serve", "--instances", "4", "--devices-per-instance", "8", "--horizon", "30"], "horizon",
     ["avail", "serve", "--instances", "4", "--devices-per-instance", "8", "--horizon", "30d"]),
    *[(["avail", "simulate", *AVAIL, "--policy", f"restart-from-checkpoint,{key}=30"], key, None)
      for key in ("detect", "restart", "repair", "checkpoint-every", "checkpoint-cost")],
    (["avail", "goodput", *TRAIN, "--plan", "tp=1", "--storage-bandwidth", "2e12"], "storage-bandwidth",
     ("TB/s", "GB/s")),
    (["train", "job", *TRAIN, "--tokens", "10B", "--checkpoint-every", "30"], "checkpoint-every",
     ["train", "job", *TRAIN, "--tokens", "10B", "--checkpoint-every", "30min", "--replications", "2"]),
    (["train", "job", *TRAIN, "--tokens", "10B", "--storage-bandwidth", "2000"], "storage-bandwidth", ("TB/s",)),
    (["train", "job", *TRAIN, "--tokens", "10B", "--price", "2.5"], "price", ("device-hour",)),
    (["infer", "search", *SERVE, "--devices", "8", "--slo", "ttft=2s,tpot=100ms", "--price", "2.5"], "price",
     ("device-hour",)),
    (["train", "job", *TRAIN, "--tokens", "10B", "--energy-price", "0.08"], "energy-price", ("kWh",)),
    (["train", "job", *TRAIN, "--tokens", "10B", "--device-power", "700"], "device-power", ("W",)),
    (["train", "search", *TRAIN, "--faults", "catalog:llama3-54day", "--checkpoint-every", "30"], "checkpoint-every",
     None),
    (["train", "sensitivity", *TRAIN, "--delta", "10"], "delta", ("%",)),
    (["train", "simulate", *TRAIN, "--what-if", "hbm_bandwidth=2"], "hbm_bandwidth", ("TB/s",)),
    *[(["infer", "simulate", *SERVE, "--deployment", "mixed:tp=1", "--slo", slo], field, None)
      for slo, field in (("ttft=2,tpot=100ms", "slo.ttft"), ("ttft=2s,tpot=100", "slo.tpot"))],
    (["infer", "simulate", *SERVE[:4], "--traffic", TRAFFIC + ",duration=60", "--deployment", "mixed:tp=1"],
     "duration", ["infer", "simulate", *SERVE[:4], "--traffic", TRAFFIC + ",duration=60s", "--deployment", "mixed:tp=1"]),
    (["infer", "simulate", *SERVE[:4], "--traffic", "closed:concurrency=4,input=100,output=10,requests=8,think=2",
      "--deployment", "mixed:tp=1"], "think", None),
    (["infer", "simulate", *SERVE, "--deployment", "mixed:tp=1,overhead=0.001"], "overhead", None),
    (["infer", "dynamic", *SERVE, "--deployment", "prefill:tp=1;decode:tp=1", "--switch-cost", "30"], "switch_cost",
     None),
    (["infer", "dynamic", *SERVE, "--deployment", "prefill:tp=1;decode:tp=1", "--interval", "15"], "interval", None),
    (["infer", "autoscale", *SERVE, "--deployment", "mixed:tp=1,replicas=2", "--startup", "60"], "startup", None),
]


@pytest.mark.parametrize("argv,field,accepted", [(a, f, ok) for a, f, ok in CASES],
                         ids=[" ".join(a[:2]) + " " + f for a, f, _ in CASES])
def test_bare_number_is_refused(argv, field, accepted):
    units = accepted if isinstance(accepted, tuple) else DURATION_UNITS
    text = refused(argv, field, units)
    assert "unit" in text
    if isinstance(accepted, list):
        result = invoke(*accepted, "--json") if accepted[0] != "avail" or accepted[1] != "checkpoint-interval" else \
            invoke(*accepted)
        assert result.exit_code == 0, (accepted, result.exception, result.output[-500:])


def test_zero_needs_no_unit():
    from windtunnel.avail.units import parse_duration
    from windtunnel.infer.units import parse_seconds

    assert parse_duration("0", "detect") == 0.0 and parse_seconds("0", "think") == 0.0
    assert parse_seconds(0.5, "overhead") == 0.5  # a number from YAML or the API is seconds (documented)


def test_checkpoint_cost_above_interval_warns():
    argv = ["avail", "markov", *AVAIL, "--checkpoint-every", "30s", "--checkpoint-cost", "60s"]
    doc = json.loads(invoke(*argv, "--json").stdout)
    assert any("checkpoint cost (60 s) >= checkpoint interval (30 s)" in w for w in doc["warnings"])
    text = invoke(*argv).stdout
    assert "warning: checkpoint cost" in text
    fine = json.loads(invoke("avail", "markov", *AVAIL, "--json").stdout)
    assert fine["warnings"] == []


def test_checkpoint_interval_below_a_step_warns():
    doc = json.loads(invoke("avail", "simulate", *AVAIL, "--checkpoint-every", "2s", "--checkpoint-cost", "1s",
                            "--step-time", "10s", "--replications", "5", "--json").stdout)
    assert any("shorter than one training step" in w for w in doc["warnings"])


def test_train_job_warns_on_slow_checkpoints():
    doc = json.loads(invoke("train", "job", *TRAIN, "--tokens", "10B", "--checkpoint-every", "30s",
                            "--storage-bandwidth", "1GB/s", "--replications", "2", "--json").stdout)
    assert any("checkpoint cost" in w and ">= checkpoint interval" in w for w in doc["warnings"])


@pytest.mark.parametrize("slo,needle", [("ttft=2s,tpot=1ms", "tpot=1 ms is below one decode iteration"),
                                        ("ttft=1ms,tpot=100ms", "ttft=1 ms is below the prefill")])
def test_slo_below_one_iteration_warns(slo, needle):
    argv = ["infer", "simulate", *SERVE, "--deployment", "mixed:tp=1", "--slo", slo]
    doc = json.loads(invoke(*argv, "--json").stdout)
    assert any(needle in w for w in doc["warnings"]), doc["warnings"]
    assert "warning: SLO" in invoke(*argv).stdout
    ok = json.loads(invoke("infer", "simulate", *SERVE, "--deployment", "mixed:tp=1", "--json").stdout)
    assert ok["warnings"] == []


def test_infer_search_warns_on_an_impossible_slo():
    argv = ["infer", "search", *SERVE, "--devices", "2", "--requests", "100", "--slo", "ttft=2s,tpot=1ms"]
    doc = json.loads(invoke(*argv, "--json").stdout)
    assert any("tpot=1 ms is below one decode iteration" in w and "checked on" in w for w in doc["warnings"])
    assert "warning: SLO tpot=1 ms" in invoke(*argv).stdout


@pytest.mark.parametrize("verb,extra", [("optimize", ["--replications", "5"]),
                                        ("target", ["--replications", "3", "--horizon", "3d"])])
def test_avail_optimize_and_target_warn(verb, extra):
    argv = ["avail", verb, *AVAIL, "--checkpoint-every", "30s", "--checkpoint-cost", "60s", *extra]
    assert any("checkpoint cost (60 s)" in w for w in json.loads(invoke(*argv, "--json").stdout)["warnings"])
    assert "warning: checkpoint cost (60 s)" in invoke(*argv).stdout


def test_infer_search_price_keeps_its_currency():
    """`infer search --price` takes the unit `train job --price` takes; the cost is shown in the price's currency."""
    argv = ["infer", "search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "4", "--traffic",
            "poisson:rate=2,input=512,output=64,requests=60", "--slo", "ttft=2s,tpot=100ms", "--requests", "60",
            "--workers", "1", "--top", "2", "--price", "EUR1.9/gpu-hour"]
    doc = json.loads(invoke(*argv, "--json").stdout)
    assert doc["objective"] == "cost" and doc["currency"] == "EUR" and doc["price_per_device_hour"] == 1.9
    assert doc["best"]["cost_per_hour"] == 1.9 * doc["best"]["devices"]
    assert "EUR 1.9 per device-hour" in doc["objective_text"]
    text = invoke(*argv).stdout
    assert f"cost EUR {doc['best']['cost_per_hour']:,.2f}/h" in text
