"""No non-finite output (issue 20, scope item 3): impossible inputs are refused where they enter with one
clear error naming field, value and range; a result that cannot be true raises an InternalError with the
inputs, never a number; JSON output is strict."""

from __future__ import annotations

import json
import math

import pytest

from conftest import assert_one_clear_error
from windtunnel import load_hardware, load_model, simulate_training
from windtunnel.infer.api import simulate_serving
from windtunnel.specs.errors import InternalError, WindtunnelError, check_result
from windtunnel.specs.hardware import Tier
from windtunnel.specs.hardware import load_hardware as load_cluster
from windtunnel.specs.plan import parse_plan
from windtunnel.train.checks import check_training_result
from windtunnel.train.step import TrainingJob, simulate

CLUSTER = """clusters:
  mine:
    name: mine
    chip: h100-sxm
    tiers:
      - {{name: node, size: 8, bandwidth: {bw}, latency: {lat}}}
      - {{name: net, bandwidth: 5.0e10, latency: 1.0e-5}}
"""


@pytest.mark.parametrize("bw,lat,field,rule", [
    ("4.5e11", ".inf", "tiers.0.latency", "below 3600 s"),
    ("4.5e11", ".nan", "tiers.0.latency", "below 3600 s"),
    ("4.5e11", "7200", "tiers.0.latency", "below 3600 s"),
    ("4.5e11", "-1e-6", "tiers.0.latency", "below 3600 s"),
    ("1e-300", "2e-6", "tiers.0.bandwidth", "1e6 to 1e16 bytes/s"),
    (".inf", "2e-6", "tiers.0.bandwidth", "1e6 to 1e16 bytes/s"),
    ("0", "2e-6", "tiers.0.bandwidth", "1e6 to 1e16 bytes/s"),
])
def test_cluster_file_with_impossible_tier_is_one_clear_error(tmp_path, bw, lat, field, rule):
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER.format(bw=bw, lat=lat))
    with pytest.raises(WindtunnelError) as err:
        load_cluster(str(path), 16)
    message = str(err.value)
    assert f"field '{field}'" in message and rule in message and "\n" not in message
    assert not isinstance(err.value, InternalError)


def test_catalog_hardware_lies_in_the_physical_ranges():
    cluster = load_hardware("gb200", 72)
    assert all(1e6 <= t.bandwidth <= 1e16 and 0 <= t.latency < 3600 for t in cluster.tiers)
    Tier(name="x", bandwidth=1e6, latency=0.0)  # the bounds themselves are valid


def test_what_if_outside_the_physical_range_is_refused():
    with pytest.raises(WindtunnelError, match="what-if 'scale_out_bandwidth=x1e-25'.*1e6 to 1e16"):
        simulate_training("llama3-8b", "h100-sxm", 16, seq_len=4096, global_batch=16, plan="tp=8",
                          what_if="scale_out_bandwidth=x1e-25")


def test_serving_overhead_beyond_a_minute_is_refused():
    with pytest.raises(WindtunnelError, match="'overhead'.*1e\\+308.*0 to 60 s"):
        simulate_serving("llama3-8b", "h100-sxm", "mixed:tp=1,overhead=1e308s",
                         "poisson:rate=5,input=fixed(100),output=fixed(10),requests=10")


def test_an_impossible_training_result_is_an_internal_error():
    """A cluster made impossible behind the validation (model_copy skips it) gives an InternalError naming
    the value and the job, never an infinite step time."""
    cluster = load_hardware("h100-sxm", 16)
    broken = cluster.model_copy(update={"tiers": [cluster.tiers[0].model_copy(update={"latency": math.inf}),
                                                  cluster.tiers[1]]})
    from windtunnel import load_model
    from windtunnel.specs.plan import parse_plan

    job = TrainingJob(model=load_model("llama3-8b"), cluster=broken, plan=parse_plan("tp=8"), seq_len=4096,
                      global_batch=16)
    with pytest.raises(InternalError) as err:
        simulate(job)
    message = str(err.value)
    assert message.startswith("Internal error, please report it") and "llama3-8b" in message and "inf" in message


def test_result_checks_catch_each_kind():
    job = TrainingJob(model=load_model("llama3-8b"), cluster=load_hardware("h100-sxm", 8), plan=parse_plan("tp=8"),
                      seq_len=2048, global_batch=8)
    good = simulate(job)
    check_training_result(good, job)
    for update in ({"step_time_s": float("nan")}, {"step_time_s": -1.0}, {"step_time_s": 0.0}, {"mfu": 1.5},
                   {"breakdown": {**good.breakdown, "compute": float("inf")}},
                   {"feasible": True, "peak_memory_bytes": 2 * good.memory_capacity_bytes}):
        with pytest.raises(InternalError):
            check_training_result(good.model_copy(update=update), job)
    check_result("x", {}, times={"a": None, "b": 0.0}, shares={"s": 1.0})
    with pytest.raises(InternalError, match="'s' is -0.5"):
        check_result("x", {}, shares={"s": -0.5})


def test_serving_result_is_finite_and_its_json_strict():
    r = simulate_serving("llama3-8b", "h100-sxm", "mixed:tp=1",
                         "poisson:rate=5,input=lognormal(500,0.5),output=lognormal(50,0.5),requests=30")
    text = json.dumps(r.to_json_dict(), allow_nan=False)
    assert "NaN" not in text and "Infinity" not in text


def test_training_json_strict():
    r = simulate_training("mixtral-8x7b", "h100-sxm", 16, seq_len=4096, global_batch=16, plan="tp=2,ep=8")
    json.dumps(r.to_json_dict(), allow_nan=False)


def test_infer_simulate_json_is_byte_identical_across_runs(cli):
    """Same inputs and seed, two processes: the same bytes (wall-clock seconds only with --timings)."""
    args = ("infer", "simulate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--deployment",
            "mixed:tp=1,replicas=2", "--traffic",
            "poisson:rate=8,input=lognormal(800,0.6),output=lognormal(150,0.6),requests=60", "--seed", "3", "--json")
    first, second = cli(*args), cli(*args)
    assert first.returncode == second.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert "wall_s" not in json.loads(first.stdout)
    timed = cli(*args, "--timings")
    assert timed.returncode == 0 and json.loads(timed.stdout)["wall_s"] > 0


def test_cli_impossible_tier_is_one_clear_error(cli, tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER.format(bw="4.5e11", lat=".inf"))
    proc = cli("train", "simulate", "--model", "llama3-8b", "--hardware", str(path), "--devices", "16",
               "--seq-len", "4096", "--global-batch", "16", "--plan", "tp=8", "--json")
    assert_one_clear_error(proc, "tiers.0.latency", "inf", "below 3600 s")
    assert "Infinity" not in proc.stdout


def test_strict_json_names_the_non_finite_value():
    from windtunnel.report.jsonout import dumps

    assert dumps({"a": [1.0, None]}) == '{"a": [1.0, null]}'
    with pytest.raises(InternalError, match=r"b\[1\] = nan"):
        dumps({"a": 1, "b": [0.0, float("nan")]})
