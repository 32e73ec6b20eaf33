"""train sensitivity: elasticities have the right signs on random jobs, a compute-bound job's largest is on flops,
a DP-exposed job's on the tier that carries DP; the CLI's JSON and HTML."""

from __future__ import annotations

import json
import math
import random

import pytest

from conftest import assert_one_clear_error, small_dense
from windtunnel.insight import explain_job, training_job, training_sensitivity
from windtunnel.specs.errors import WindtunnelError
from windtunnel.train.sensitivity import COSTS, sensitivity

CONTINUOUS = ["flops", "hbm_bandwidth", "hbm_capacity", "scale_up_bandwidth", "scale_out_bandwidth", "link_latency", "scale_up_domain",
              "host_overhead"]


def _random_jobs(count: int, seed: int):
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        model = rng.choice([small_dense(), "mixtral-8x7b", "llama3-8b"])
        plan = (f"tp={rng.choice([1, 2, 4, 8])},pp={rng.choice([1, 2, 4])},mbs={rng.choice([1, 2])},"
                f"recompute={rng.choice(['none', 'selective', 'full'])},zero={rng.choice([0, 1, 2, 3])},"
                f"vpp={rng.choice([1, 1, 2])}" + (f",ep={rng.choice([1, 2, 4, 8])}" if model == "mixtral-8x7b" else ""))
        try:
            job = training_job(model, rng.choice(["h100-sxm", "a100-80g", "gb200", "ascend-910b"]),
                               rng.choice([8, 16, 32, 64]), seq_len=2048, global_batch=rng.choice([32, 64, 128]),
                               plan=plan)
            out.append(sensitivity(job, resources=CONTINUOUS))
        except WindtunnelError:
            continue
    return out


def test_more_of_a_resource_is_never_slower():
    """Random jobs: a resource that buys speed has elasticity <= 0, a cost (latency, host time) >= 0."""
    for document in _random_jobs(25, seed=7):
        for name, value in document["elasticities"].items():
            assert value is not None and math.isfinite(value)
            if name in COSTS:
                assert value >= -1e-9, (document["plan"], name, value)
            else:
                assert value <= 1e-9, (document["plan"], name, value)
        assert document["elasticities"]["hbm_capacity"] == 0.0  # capacity decides fitting, not speed


def test_compute_bound_job_is_most_elastic_to_flops():
    document = training_sensitivity("llama3-8b", "h100-sxm", 8, seq_len=8192, global_batch=64,
                                    plan="tp=1,pp=1,mbs=1,recompute=selective,zero=1")
    assert document["largest"] == "flops"
    assert -1.0 - 1e-9 <= document["elasticities"]["flops"] < -0.7
    assert document["triangle"]["compute"] > 0.5


def test_dp_exposed_job_is_most_elastic_to_the_tier_carrying_dp():
    """ZeRO-3 of a 70B model with one small micro-batch per replica: the DP gathers on the scale-out tier hold the
    step, the verdict says so and the step is most elastic to scale-out bandwidth."""
    job = training_job("llama3-70b", "h100-sxm", 128, seq_len=1024, global_batch=16,
                       plan="tp=8,pp=1,mbs=1,recompute=full,zero=3")
    verdict = explain_job(job, remedies=False)
    assert verdict["bottleneck"]["resource"] == "scale-out:dp"
    assert verdict["tiers"]["scale-out"]["carries"] == ["dp"]
    document = sensitivity(job)
    assert document["largest"] == "scale_out_bandwidth"
    assert document["elasticities"]["scale_out_bandwidth"] < -0.5


def test_capacity_threshold_is_the_peak_memory():
    document = training_sensitivity("llama3-8b", "h100-sxm", 8, seq_len=4096, global_batch=16, plan="tp=1,mbs=1",
                                    resources=["hbm_capacity"], delta=0.5)
    rows = {row["factor"]: row for row in document["variants"]}
    assert document["fits_down_to_capacity_bytes"] == document["peak_memory_bytes"]
    fits_at_half = 0.5 * document["memory_capacity_bytes"] >= document["peak_memory_bytes"]
    assert rows[0.5]["feasible"] == fits_at_half


def test_unknown_resource_and_bad_delta_are_errors():
    job = training_job("llama3-8b", "h100-sxm", 8, seq_len=4096, global_batch=16, plan="tp=1,mbs=1")
    with pytest.raises(WindtunnelError, match="hbm_bandwidth"):
        sensitivity(job, resources=["nvlink"])
    with pytest.raises(WindtunnelError, match="delta"):
        sensitivity(job, delta=1.5)


def test_cli_sensitivity_json_and_report(cli, tmp_path):
    report = tmp_path / "triangle.html"
    proc = cli("train", "sensitivity", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8",
               "--global-batch", "16", "--plan", "tp=1,mbs=1", "--delta", "10%", "--report", str(report), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert set(doc["elasticities"]) >= {"flops", "hbm_bandwidth", "scale_out_bandwidth", "hbm_capacity"}
    assert "scatterternary" in report.read_text().lower() or "ternary" in report.read_text()
    bare = cli("train", "sensitivity", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8",
               "--global-batch", "16", "--delta", "10")
    assert_one_clear_error(bare, "delta", "%")


def test_search_re_searches_the_best_plan_at_each_variant():
    """With search, the best plan moves with the hardware: at half the HBM the best plan fits in half, and more
    capacity never makes the best step slower."""
    document = training_sensitivity("llama3-8b", "h100-sxm", 8, seq_len=4096, global_batch=32, plan="tp=1,mbs=1",
                                    resources=["hbm_capacity", "flops"], search=True, delta=0.5)
    searched = document["searched"]
    assert searched["base_best_plan"] and searched["elasticities"]["hbm_capacity"] <= 0.0
    assert searched["elasticities"]["flops"] < -0.5
    half = next(row for row in document["variants"] if row["resource"] == "hbm_capacity" and row["factor"] == 0.5)
    assert half["feasible"] is False  # the given plan stops fitting...
    assert half["best_plan"] != document["plan"]  # ...and the search moves to one that does
    assert document["triangle"]["capacity"] > 0.0
