"""The built-in catalog: every model simulates on a matching cluster, every number is positive and sourced."""

from __future__ import annotations

import math

import pytest

from windtunnel import simulate_training
from windtunnel.specs.hardware import chip_names, cluster_names, load_chip, load_hardware
from windtunnel.specs.model import load_model, model_names
from windtunnel.specs.yamlio import catalog_dir, read_yaml

# model -> (hardware, devices, seq_len, global_batch, plan)
PLANS = {
    "deepseek-v3": ("h800", 256, 4096, 256, "tp=1,pp=8,ep=32,schedule=dualpipe"),
    "gpt-oss-120b": ("h100-sxm", 16, 4096, 32, "tp=1,ep=16"),
    "gpt3-175b": ("a100-80g", 64, 2048, 64, "tp=8,pp=8,recompute=full"),
    "llama3-405b": ("h100-sxm", 128, 8192, 16, "tp=8,pp=16,recompute=full"),
    "llama3-70b": ("h100-sxm", 32, 4096, 32, "tp=8,pp=4"),
    "llama3-8b": ("h100-sxm", 8, 4096, 16, "tp=1"),
    "megatron-1t": ("a100-80g", 64, 2048, 8, "tp=8,pp=8"),
    "megatron-530b": ("a100-80g", 64, 2048, 16, "tp=8,pp=8,vpp=1"),
    "mixtral-8x7b": ("h100-sxm", 16, 4096, 16, "tp=2,ep=8"),
    "pangu-ultra-135b": ("ascend-910b", 128, 4096, 32, "tp=8,pp=8"),
    "pangu-ultra-moe-718b": ("cloudmatrix384", 384, 4096, 96, "tp=1,pp=8,ep=16"),
    "qwen3-235b-a22b": ("h100-sxm", 64, 4096, 64, "tp=1,pp=4,ep=16"),
    "qwen3-30b-a3b": ("h100-sxm", 16, 4096, 32, "tp=1,ep=8"),
}


def _generic_plan(name: str) -> tuple:
    """A plan that validates for a catalog model not in PLANS (added later): tp=1, ep=largest divisor <= 8."""
    m = load_model(name)
    ep = 1 if m.moe is None else max(d for d in (1, 2, 4, 8) if m.moe.experts % d == 0)
    return ("h100-sxm", 8, 2048, 8, f"tp=1,ep={ep}")


def _check(result) -> None:
    assert math.isfinite(result.step_time_s) and result.step_time_s > 0
    assert 0 < result.mfu < 1 and 0 < result.hfu < 1
    assert result.peak_memory_bytes > 0
    assert sum(result.breakdown.values()) == pytest.approx(result.step_time_s, rel=0.01)
    if result.feasible:
        assert result.infeasible_reason is None and result.peak_memory_bytes <= result.memory_capacity_bytes
    else:
        assert "GiB" in result.infeasible_reason and result.peak_memory_bytes > result.memory_capacity_bytes


@pytest.mark.parametrize("name", model_names())
def test_every_catalog_model_simulates(name):
    """Every catalog model gives a finite, self-consistent result (feasible or not) on a matching cluster."""
    hardware, devices, seq, gb, plan = PLANS.get(name) or _generic_plan(name)
    _check(simulate_training(name, hardware, devices, seq_len=seq, global_batch=gb, plan=plan))


def test_mla_moe_models_use_expert_parallelism():
    """DeepSeek-V3 (H800) and Pangu Ultra MoE (CloudMatrix384, Ascend 910C) simulate with ep>1 and MLA,
    spending time in expert all-to-alls."""
    for name in ("deepseek-v3", "pangu-ultra-moe-718b"):
        m = load_model(name)
        assert m.mla is not None and m.moe is not None
        hardware, devices, seq, gb, plan = PLANS[name]
        r = simulate_training(name, hardware, devices, seq_len=seq, global_batch=gb, plan=plan)
        assert "ep=" in r.plan and "ep=1," not in r.plan
        assert r.breakdown.get("ep_comm", 0.0) > 0.0
        assert "ep" in r.placement


def test_ascend_jobs():
    """An Ascend 910C job on CloudMatrix384 and an Ascend 910B job on Atlas 800T A2 both simulate feasibly."""
    c = simulate_training("llama3-70b", "cloudmatrix384", 384, seq_len=4096, global_batch=96, plan="tp=8,pp=4")
    assert c.chip == "ascend-910c" and c.hardware == "cloudmatrix384" and c.feasible
    b = simulate_training("pangu-ultra-135b", "ascend-910b", 128, seq_len=4096, global_batch=32, plan="tp=8,pp=8")
    assert b.chip == "ascend-910b" and b.hardware == "atlas-800t-a2" and b.feasible
    _check(c)
    _check(b)


def test_device_count_limits():
    """CloudMatrix384 has a scale-out tier, so 768 devices (two supernodes) is fine; 0 devices is an error."""
    assert load_hardware("cloudmatrix384", 768).devices == 768
    from windtunnel.specs.errors import WindtunnelError

    with pytest.raises(WindtunnelError, match="devices"):
        load_hardware("h100-sxm", 0)


@pytest.mark.parametrize("name", chip_names())
def test_chip_numbers_positive_and_sourced(name):
    """Every chip: positive peaks, HBM, links; bf16 peak present; fp8 >= bf16 where present; non-empty sources."""
    chip = load_chip(name)
    assert chip.peak_flops and all(v > 0 for v in chip.peak_flops.values())
    assert "bf16" in chip.peak_flops
    if "fp8" in chip.peak_flops:
        assert chip.peak_flops["fp8"] >= chip.peak_flops["bf16"]
    assert chip.hbm_bytes > 2**30 and chip.hbm_bandwidth > 1e11
    for link in (chip.scale_up, chip.scale_out):
        assert link.bandwidth > 0 and link.latency > 0
    assert chip.scale_up.bandwidth >= chip.scale_out.bandwidth
    for key in ("peak_flops", "hbm_bytes", "hbm_bandwidth", "scale_up", "scale_out"):
        assert isinstance(chip.sources.get(key), str) and chip.sources[key].strip(), key


@pytest.mark.parametrize("name", chip_names())
def test_chip_default_cluster_matches_chip_links(name):
    """A chip's default cluster uses that chip, and its inner/outer tiers are the chip's scale-up/scale-out links."""
    chip = load_chip(name)
    cluster = load_hardware(name, 16)
    assert cluster.id == chip.default_cluster and cluster.chip.id == name
    assert cluster.tiers[0].bandwidth == chip.scale_up.bandwidth
    assert cluster.tiers[-1].bandwidth == chip.scale_out.bandwidth


def test_cluster_specs_positive_and_sourced():
    """Every cluster: known chip, tiers ordered innermost first (growing size, non-increasing bandwidth),
    positive bandwidth, non-empty source strings."""
    doc = read_yaml(catalog_dir("hardware", "clusters.yaml"))["clusters"]
    assert set(doc) == set(cluster_names())
    for cid, spec in doc.items():
        assert spec["chip"] in chip_names(), cid
        tiers = spec["tiers"]
        assert tiers and all(t["bandwidth"] > 0 and t["latency"] >= 0 for t in tiers), cid
        sizes = [t.get("size") for t in tiers]
        bounded = [s for s in sizes if s is not None]
        assert bounded == sorted(bounded) and len(set(bounded)) == len(bounded), cid
        bandwidths = [t["bandwidth"] for t in tiers]
        assert bandwidths == sorted(bandwidths, reverse=True), cid
        sources = spec.get("sources") or {}
        assert sources and all(isinstance(v, str) and v.strip() for v in sources.values()), cid


@pytest.mark.parametrize("name", model_names())
def test_published_total_params_match(name):
    """Catalog shape reproduces the published total parameter count within 3%, and is sourced."""
    m = load_model(name)
    assert m.published_params_b and "total" in m.published_params_b
    assert m.total_params() == pytest.approx(m.published_params_b["total"] * 1e9, rel=0.03)
    assert m.sources and all(isinstance(v, str) and v.strip() for v in m.sources.values())
    if m.moe is not None:
        assert m.active_params() < m.total_params()
    else:
        assert m.active_params() == m.total_params()
