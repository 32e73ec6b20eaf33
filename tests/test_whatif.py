"""--what-if: values carry units (a bare number is an error), unknown keys name the valid ones, and each key
changes what it says on the chip, the tiers or the host; the CLI shows the variant beside the base."""

from __future__ import annotations

import json

import pytest

from conftest import assert_one_clear_error
from windtunnel.insight import explain_training, training_job
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.whatif import KEYS, apply_to_cluster, parse_what_if
from windtunnel.train.step import simulate
from windtunnel.train.variant import job_variant

JOB = ["--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "16", "--seq-len", "4096",
       "--global-batch", "32", "--plan", "tp=2,pp=1,mbs=1,recompute=selective,zero=1"]


@pytest.mark.parametrize(("item", "key", "factor", "value"), [
    ("hbm_bandwidth=x1.5", "hbm_bandwidth", 1.5, None),
    ("hbm_capacity=96GiB", "hbm_capacity", None, 96 * 2**30),
    ("hbm_bandwidth=1.2TB/s", "hbm_bandwidth", None, 1.2e12),
    ("scale_out_bandwidth=400Gb/s", "scale_out_bandwidth", None, 50e9),
    ("flops=1200TFLOP/s", "flops", None, 1.2e15),
    ("link_latency=5us", "link_latency", None, 5e-6),
    ("scale_up_domain=72devices", "scale_up_domain", None, 72.0),
    ("host-overhead=x2", "host_overhead", 2.0, None),
])
def test_parse_factor_and_quantities(item, key, factor, value):
    change = parse_what_if([item]).changes[0]
    assert change.key == key and change.factor == factor
    assert change.value == (pytest.approx(value) if value is not None else None)


@pytest.mark.parametrize("item", ["hbm_capacity=96", "hbm_bandwidth=1.2", "hbm_capacity=96GiB/s", "flops=x0",
                                  "scale_up_domain=7.5devices", "hbm_bandwidth"])
def test_bad_values_are_clear_errors(item):
    with pytest.raises(WindtunnelError) as info:
        parse_what_if([item])
    assert "what-if" in str(info.value).lower() or item.split("=")[0] in str(info.value)


def test_unknown_key_names_every_valid_key():
    with pytest.raises(WindtunnelError) as info:
        parse_what_if(["hbm_bandwith=x2"])
    for key in KEYS:
        assert key in str(info.value)


def test_duplicate_key_is_an_error():
    with pytest.raises(WindtunnelError, match="twice"):
        parse_what_if(["flops=x2", "flops=x3"])


def test_cluster_changes_land_where_they_say():
    cluster = load_hardware("h100-sxm", 64)
    changed = apply_to_cluster(cluster, parse_what_if(["hbm_bandwidth=x1.5", "scale_out_bandwidth=x2", "flops=x2",
                                                       "hbm_capacity=96GiB", "scale_up_domain=16devices"]))
    assert changed.chip.hbm_bandwidth == pytest.approx(1.5 * cluster.chip.hbm_bandwidth)
    assert changed.chip.hbm_bytes == 96 * 2**30
    assert changed.chip.peak_flops["fp8"] == pytest.approx(2 * cluster.chip.peak_flops["fp8"])
    assert changed.tiers[0].bandwidth == cluster.tiers[0].bandwidth  # scale-up untouched
    assert changed.tiers[0].size == 16
    assert changed.tiers[1].bandwidth == pytest.approx(2 * cluster.tiers[1].bandwidth)
    assert cluster.chip.hbm_bandwidth == load_hardware("h100-sxm", 64).chip.hbm_bandwidth  # the base is unchanged


def test_mesh_domain_keeps_its_per_link_bandwidth():
    """A full mesh (HCCS) that grows gets a link per new peer: the device's tier bandwidth grows with it."""
    cluster = load_hardware("ascend-910b", 32)
    if getattr(cluster.tiers[0], "topology", "switched") != "mesh":
        pytest.skip("catalog tier is not a mesh")
    changed = apply_to_cluster(cluster, parse_what_if(["scale_up_domain=x2"]))
    assert changed.tiers[0].bandwidth == pytest.approx(cluster.tiers[0].bandwidth * 15 / 7)


def test_host_overhead_changes_only_the_host_time():
    job = training_job("llama3-8b", "h100-sxm", 8, seq_len=4096, global_batch=16, plan="tp=1,mbs=1,zero=1")
    base = simulate(job)
    slower = simulate(job_variant(job, ["host_overhead=x10"]))
    assert slower.breakdown["host_overhead"] > base.breakdown.get("host_overhead", 0.0)
    assert slower.step_time_s > base.step_time_s
    assert any(a.startswith("what-if: host_overhead=x10") for a in slower.assumptions)


def test_more_hbm_capacity_makes_the_headline_fit():
    document = explain_training("llama3-405b", "h100-sxm", 16384, seq_len=8192, global_batch=2048,
                                plan="tp=8,pp=16,mbs=1,recompute=selective,sp=true,zero=1",
                                what_if=["hbm_capacity=96GiB"], remedies=False)
    assert not document["feasible"] and document["variant"]["feasible"]
    assert document["variant"]["step_time_s"] == document["step_time_s"]
    assert document["variant"]["what_if"] == "hbm_capacity=96GiB"


def test_cli_simulate_what_if_json_carries_base_and_variant(cli):
    proc = cli("train", "simulate", *JOB, "--what-if", "scale_up_bandwidth=x0.25", "--what-if", "flops=x2", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["what_if"] == "scale_up_bandwidth=x0.25,flops=x2"
    assert doc["variant"]["step_time_s"] != doc["step_time_s"]
    assert doc["variant"]["plan"] == doc["plan"]


@pytest.mark.parametrize("verb", [["train", "simulate"], ["train", "explain"], ["train", "sensitivity"]])
def test_cli_unknown_what_if_key_is_one_clear_error(cli, verb):
    proc = cli(*verb, *JOB, "--what-if", "nvlink=x2")
    assert_one_clear_error(proc, "nvlink", "hbm_bandwidth", "scale_out_bandwidth", "host_overhead")


def test_cli_bare_number_is_an_error(cli):
    proc = cli("train", "simulate", *JOB, "--what-if", "hbm_capacity=96")
    assert_one_clear_error(proc, "hbm_capacity", "GiB")


def test_cluster_yaml_may_define_its_chip_inline(tmp_path):
    """A chip architect's chip that is in no catalog: a cluster file with the chip's fields inline."""
    path = tmp_path / "future.yaml"
    path.write_text(
        "name: future cluster\n"
        "chip: {name: Future X, vendor: nvidia, generation: hopper, peak_flops: {bf16: 2.0e+15},\n"
        "       hbm_bytes: 206158430208, hbm_bandwidth: 8.0e+12}\n"
        "tiers:\n"
        "  - {name: node, size: 8, bandwidth: 900.0e+9, latency: 2.0e-6}\n"
        "  - {name: scale-out, size: null, bandwidth: 100.0e+9, latency: 5.0e-6}\n")
    future = simulate(training_job("llama3-8b", str(path), 16, seq_len=4096, global_batch=32, plan="tp=1,mbs=1"))
    h100 = simulate(training_job("llama3-8b", "h100-sxm", 16, seq_len=4096, global_batch=32, plan="tp=1,mbs=1"))
    assert future.chip == "future-chip" and future.memory_capacity_bytes == 192 * 2**30
    assert future.step_time_s < h100.step_time_s
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace("hbm_bandwidth: 8.0e+12", "hbm_bandwith: 8.0e+12"))
    with pytest.raises(WindtunnelError, match="hbm_bandwi"):
        load_hardware(str(bad), 16)


def test_cli_search_on_what_if_hardware(cli):
    proc = cli("train", "search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "16",
               "--global-batch", "32", "--pin", "tp=1,2", "--pin", "pp=1", "--pin", "vpp=1", "--pin", "cp=1",
               "--pin", "recompute=full", "--top", "1", "--refine", "2", "--what-if", "hbm_capacity=24GiB", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["what_if"] == "hbm_capacity=24GiB"
    assert all(row["peak_memory_bytes"] <= 24 * 2**30 for row in doc["plans"])


def test_api_simulate_training_takes_what_ifs():
    from windtunnel.api import simulate_training

    base = simulate_training("llama3-8b", "h100-sxm", 8, seq_len=4096, global_batch=16, plan="tp=1,mbs=1")
    faster = simulate_training("llama3-8b", "h100-sxm", 8, seq_len=4096, global_batch=16, plan="tp=1,mbs=1",
                               what_if=["flops=x2", "hbm_bandwidth=x2"])
    assert faster.step_time_s < base.step_time_s and faster.band is not None


def test_cli_avail_goodput_what_if_beside_the_base(cli):
    proc = cli("avail", "goodput", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "64",
               "--global-batch", "64", "--plan", "tp=1,mbs=1", "--what-if", "scale_out_bandwidth=x0.5", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    base, variant = doc["rows"][0], doc["variant"]["rows"][0]
    assert doc["variant"]["what_if"] == "scale_out_bandwidth=x0.5"
    assert variant["step_time_s"] >= base["step_time_s"] and variant["goodput_tokens_per_s"] <= base["goodput_tokens_per_s"]
