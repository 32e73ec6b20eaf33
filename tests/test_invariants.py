"""Physical invariants of the training-step simulation (monotonicity, weak scaling, determinism)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import small_dense
from windtunnel import load_hardware, load_model, simulate_training
from windtunnel.specs.plan import parse_plan
from windtunnel.train.step import TrainingJob, simulate


def faster_links(cluster, factor: float = 2.0):
    return cluster.model_copy(update={"tiers": [t.model_copy(update={"bandwidth": t.bandwidth * factor})
                                                for t in cluster.tiers]})


# (model, chip, devices, seq_len, global_batch, plan)
BANDWIDTH_CASES = [
    pytest.param("llama3-8b", "h100-sxm", 16, 4096, 32, "tp=2,pp=4", id="dense-pp4"),
    pytest.param("llama3-70b", "h100-sxm", 64, 4096, 64, "tp=8,pp=4,vpp=2", id="dense-interleaved"),
    pytest.param("llama3-8b", "a100-80g", 32, 4096, 64, "tp=4,cp=2,zero=3", id="dense-cp-zero3"),
    pytest.param("qwen3-30b-a3b", "h100-sxm", 16, 4096, 32, "tp=1,ep=8", id="moe-ep8"),
    pytest.param("mixtral-8x7b", "h100-sxm", 64, 4096, 64, "tp=2,pp=4,ep=8,zero=2", id="moe-pp4-ep8"),
]


@pytest.mark.parametrize("model,chip,devices,seq,gb,plan", BANDWIDTH_CASES)
def test_more_link_bandwidth_never_slower(model, chip, devices, seq, gb, plan):
    """Doubling every tier's bandwidth never lengthens the step, nor exposes more communication."""
    cluster = load_hardware(chip, devices)
    base = simulate_training(model, cluster, seq_len=seq, global_batch=gb, plan=plan)
    fast = simulate_training(model, faster_links(cluster), seq_len=seq, global_batch=gb, plan=plan)
    assert fast.step_time_s <= base.step_time_s * (1 + 1e-9)
    comm = [k for k in base.breakdown if k.endswith("_comm")]
    assert sum(fast.breakdown.get(k, 0.0) for k in comm) <= sum(base.breakdown[k] for k in comm) * (1 + 1e-9) + 1e-12


def test_more_bandwidth_speeds_up_a_communication_bound_moe_step():
    """EP=8 across two nodes exposes all-to-all time, so 4x bandwidth must make the step strictly faster."""
    cluster = load_hardware("h100-sxm", 16)
    base = simulate_training("qwen3-30b-a3b", cluster, seq_len=4096, global_batch=32, plan="tp=1,ep=8")
    fast = simulate_training("qwen3-30b-a3b", faster_links(cluster, 4.0), seq_len=4096, global_batch=32, plan="tp=1,ep=8")
    assert base.breakdown.get("ep_comm", 0.0) > 0
    assert fast.step_time_s < base.step_time_s * 0.99


@pytest.mark.parametrize("plan", ["tp=1,pp=4", "tp=2,pp=2,vpp=2", "tp=1", "tp=2,pp=2,recompute=full"])
def test_bigger_micro_batch_never_lowers_activation_memory(plan):
    """At a fixed global batch, raising mbs never lowers the activation bytes of the worst device."""
    values = []
    for mbs in (1, 2, 4, 8):
        r = simulate_training("llama3-8b", "h100-sxm", 8, seq_len=2048, global_batch=64, plan=f"{plan},mbs={mbs}")
        values.append(r.memory_breakdown["activations"])
    assert all(b >= a * (1 - 1e-9) for a, b in zip(values, values[1:], strict=False)), values
    assert values[-1] > values[0]


def test_recompute_never_raises_activation_memory():
    """none >= selective >= full activation bytes (unfused attention, where selective matters)."""
    acts = {}
    for mode in ("none", "selective", "full"):
        r = simulate_training("llama3-8b", "h100-sxm", 8, seq_len=4096, global_batch=16, plan=f"tp=2,pp=2,recompute={mode}",
                              flash_attention=False)
        acts[mode] = r.memory_breakdown["activations"]
    assert acts["none"] > acts["selective"] > acts["full"]


@pytest.mark.parametrize("model,plan,per_dp_devices", [
    ("llama3-8b", "tp=8", 8),
    ("llama3-8b", "tp=1,pp=4", 4),
    ("qwen3-30b-a3b", "tp=1,ep=8", 8),
])
def test_weak_scaling_over_dp_keeps_per_device_compute(model, plan, per_dp_devices):
    """Growing dp with the global batch (same work per device) leaves per-device compute time unchanged (2%)."""
    compute = []
    for dp in (1, 8):
        r = simulate_training(model, "h100-sxm", per_dp_devices * dp, seq_len=4096, global_batch=8 * dp, plan=plan)
        compute.append(r.breakdown["compute"])
    assert compute[1] == pytest.approx(compute[0], rel=0.02)


def test_weak_scaling_throughput_per_device_degrades_gracefully():
    """8x the devices at the same per-device work keeps tokens/s per device within 25% (only DP comm grows)."""
    one = simulate_training("llama3-8b", "h100-sxm", 8, seq_len=4096, global_batch=8, plan="tp=8")
    many = simulate_training("llama3-8b", "h100-sxm", 64, seq_len=4096, global_batch=64, plan="tp=8")
    assert many.tokens_per_s_per_device <= one.tokens_per_s_per_device * (1 + 1e-9)
    assert many.tokens_per_s_per_device > 0.75 * one.tokens_per_s_per_device


def test_determinism_byte_identical_json():
    """Two identical simulate calls give byte-identical JSON (MoE, pipeline, ZeRO, all on)."""
    cluster = load_hardware("h100-sxm", 64)
    job = TrainingJob(model=load_model("mixtral-8x7b"), cluster=cluster,
                      plan=parse_plan("tp=2,pp=4,ep=8,vpp=2,zero=2"), seq_len=4096, global_batch=64)
    a = json.dumps(simulate(job).to_json_dict(), sort_keys=True)
    b = json.dumps(simulate(job).to_json_dict(), sort_keys=True)
    assert a == b
    api = [simulate_training("mixtral-8x7b", "h100-sxm", 64, seq_len=4096, global_batch=64,
                             plan="tp=2,pp=4,ep=8,vpp=2,zero=2").to_json_dict() for _ in range(2)]
    assert json.dumps(api[0], sort_keys=True) == json.dumps(api[1], sort_keys=True)
    # The API adds the prediction's band and extrapolation notes; the simulated step is the same.
    c = json.dumps({k: v for k, v in api[0].items() if k not in ("band", "extrapolation")}, sort_keys=True)
    assert json.dumps({k: v for k, v in json.loads(a).items() if k not in ("band", "extrapolation")},
                      sort_keys=True) == c


def test_result_accounting_is_consistent():
    """tokens/s, per-device rates, MFU and the breakdown agree with each other and with the step time."""
    r = simulate_training(small_dense(), "h100-sxm", 16, seq_len=2048, global_batch=64, plan="tp=2,pp=2")
    tokens = 64 * 2048
    assert r.tokens_per_s == pytest.approx(tokens / r.step_time_s, rel=1e-9)
    assert r.tokens_per_s_per_device == pytest.approx(r.tokens_per_s / 16, rel=1e-9)
    assert r.model_tflops_per_device == pytest.approx(r.model_flops_per_step / r.step_time_s / 16 / 1e12, rel=1e-9)
    assert r.mfu == pytest.approx(r.model_tflops_per_device * 1e12 / 989.4e12, rel=1e-9)
    assert 0 < r.mfu <= r.hfu < 1
    assert sum(r.breakdown.values()) == pytest.approx(r.step_time_s, rel=0.01)
    assert all(v >= 0 for v in r.breakdown.values())


@pytest.mark.parametrize("plan", ["tp=1,recompute=none", "tp=1,recompute=full", "tp=2,pp=2,recompute=selective"])
def test_hfu_at_least_mfu_and_full_recompute_adds_a_forward(plan):
    """HFU >= MFU; full recompute re-runs one forward, so HFU/MFU is about 4/3 (within 5%)."""
    r = simulate_training("llama3-8b", "h100-sxm", 8, seq_len=4096, global_batch=16, plan=plan)
    assert r.hfu >= r.mfu
    if "full" in plan:
        assert r.hfu / r.mfu == pytest.approx(4 / 3, rel=0.05)
    else:
        assert r.hfu / r.mfu < 1.1


def test_dualpipe_holds_two_stages_of_weights():
    """DualPipe keeps two pipeline stages per rank: 2x the 1F1B per-device weights (not 4x)."""
    model = small_dense()
    w = {}
    for schedule in ("1f1b", "dualpipe"):
        r = simulate_training(model, "h100-sxm", 4, seq_len=2048, global_batch=8, plan=f"tp=1,pp=4,zero=0,schedule={schedule}")
        w[schedule] = r.memory_breakdown["weights"]
    assert w["dualpipe"] / w["1f1b"] == pytest.approx(2.0, rel=0.1)


def test_weights_memory_matches_params_over_model_parallel():
    """ZeRO-0, no pipeline: 16-bit weights = 2 bytes * params / tp (embedding and head vocab-parallel), +-2%."""
    model = small_dense()
    r = simulate_training(model, "h100-sxm", 8, seq_len=2048, global_batch=8, plan="tp=4,zero=0")
    assert r.memory_breakdown["weights"] == pytest.approx(2 * model.total_params() / 4, rel=0.02)
    assert r.memory_breakdown["gradients"] == pytest.approx(2 * r.memory_breakdown["weights"], rel=1e-6)
    assert r.memory_breakdown["optimizer"] == pytest.approx(6 * r.memory_breakdown["weights"], rel=1e-6)


def test_zero_stages_shard_states_over_dp():
    """dp=4: ZeRO-1 divides the optimizer by 4, ZeRO-2 also the gradients, ZeRO-3 also the weights."""
    model = small_dense()
    mem = [simulate_training(model, "h100-sxm", 8, seq_len=2048, global_batch=8, plan=f"tp=2,zero={z}").memory_breakdown
           for z in range(4)]
    z0 = mem[0]
    assert mem[1]["weights"] == pytest.approx(z0["weights"]) and mem[1]["gradients"] == pytest.approx(z0["gradients"])
    assert mem[1]["optimizer"] == pytest.approx(z0["optimizer"] / 4, rel=0.02)
    assert mem[2]["gradients"] == pytest.approx(z0["gradients"] / 4, rel=0.02)
    assert mem[2]["weights"] == pytest.approx(z0["weights"])
    assert mem[3]["weights"] == pytest.approx(z0["weights"] / 4, rel=0.02)
    assert mem[3]["activations"] == pytest.approx(z0["activations"])


@pytest.mark.parametrize("model,chip,devices,plan", [
    ("llama3-8b", "h100-sxm", 16, "tp=2,pp=4"),
    ("mixtral-8x7b", "h100-sxm", 32, "tp=2,pp=2,ep=8"),
])
def test_better_hardware_never_slower(model, chip, devices, plan):
    """2x peak FLOP/s, 2x HBM bandwidth or 1/10 the link latency each never lengthen the step; 2x peak helps."""
    cluster = load_hardware(chip, devices)
    base = simulate_training(model, cluster, seq_len=4096, global_batch=64, plan=plan).step_time_s
    c = cluster.chip
    variants = {
        "peak": cluster.model_copy(update={"chip": c.model_copy(update={"peak_flops": {k: 2 * v for k, v in c.peak_flops.items()}})}),
        "hbm": cluster.model_copy(update={"chip": c.model_copy(update={"hbm_bandwidth": 2 * c.hbm_bandwidth})}),
        "latency": cluster.model_copy(update={"tiers": [t.model_copy(update={"latency": t.latency / 10}) for t in cluster.tiers]}),
    }
    times = {k: simulate_training(model, v, seq_len=4096, global_batch=64, plan=plan).step_time_s for k, v in variants.items()}
    assert all(t <= base * (1 + 1e-9) for t in times.values()), (base, times)
    assert times["peak"] < 0.8 * base


def test_recompute_costs_time():
    """Step time: none <= selective < full (recomputation re-runs forward work)."""
    t = {mode: simulate_training("llama3-8b", "h100-sxm", 16, seq_len=4096, global_batch=64,
                                 plan=f"tp=2,pp=4,recompute={mode}").step_time_s for mode in ("none", "selective", "full")}
    assert t["none"] <= t["selective"] < t["full"]


def test_context_parallel_divides_activations():
    """At 32K tokens, cp=2 and cp=4 divide the per-device activation memory by 2 and 4 (within 5%)."""
    acts = {cp: simulate_training("llama3-8b", "h100-sxm", 8, seq_len=32768, global_batch=8,
                                  plan=f"tp=2,cp={cp}").memory_breakdown["activations"] for cp in (1, 2, 4)}
    assert acts[2] == pytest.approx(acts[1] / 2, rel=0.05)
    assert acts[4] == pytest.approx(acts[1] / 4, rel=0.05)


def _attention_op(head_dim: int, phase: str = "fwd"):
    from windtunnel.graph.ops import Op

    heads, seq = 64, 8192
    scores = heads * seq * seq / 2
    op = Op("core_attention", "attention", flops=4.0 * scores * head_dim, exponentials=scores,
            bytes_moved=1e6, shape=(heads, seq, seq, head_dim))
    return op if phase == "fwd" else dataclasses.replace(op, flops=op.flops * 2.5, phase="bwd")


def test_special_function_units_bound_small_head_attention_on_blackwell():
    from windtunnel.cost.compute import attention_time
    from windtunnel.cost.efficiency import efficiency_for
    from windtunnel.specs.hardware import load_chip

    gb200, gb300 = load_chip("gb200"), load_chip("gb300")
    eff = efficiency_for(gb200)
    # head_dim 64: 256 FLOPs per exponential forward; GB200 evaluates ~5e12 exponentials/s against
    # 2.5e15 FLOP/s, so the SFUs, not the tensor cores, set the pace; GB300 doubles the SFUs.
    small = _attention_op(64)
    assert attention_time(small, gb200, eff) > 1.8 * attention_time(small, gb200.model_copy(update={"exp_per_s": None}), eff)
    assert attention_time(small, gb300, eff) < attention_time(small, gb200, eff)
    # head_dim 128 on H100: 512 FLOPs per exponential keep the tensor cores the bound.
    h100 = load_chip("h100-sxm")
    big = _attention_op(128)
    assert attention_time(big, h100, eff) == attention_time(big, h100.model_copy(update={"exp_per_s": None}), eff)


@pytest.mark.parametrize("phase", ["fwd", "bwd"])
def test_more_exponential_throughput_never_slows_attention(phase):
    from windtunnel.cost.compute import attention_time
    from windtunnel.cost.efficiency import efficiency_for
    from windtunnel.specs.hardware import load_chip

    chip = load_chip("b200")
    eff = efficiency_for(chip)
    for head_dim in (32, 64, 128, 192):
        op = _attention_op(head_dim, phase)
        times = [attention_time(op, chip.model_copy(update={"exp_per_s": rate}), eff) for rate in (1e12, 4e12, 1.6e13)]
        assert times[0] >= times[1] >= times[2]


def test_unfused_fp32_loss_moves_more_bytes_and_keeps_fp32_probabilities():
    from windtunnel.graph.ops import backward_of
    from windtunnel.graph.transformer import Sharding, head_forward

    model = load_model("llama3-8b")
    shard = Sharding(micro_batch=1, seq_len=4096)
    logits = 4096 * model.vocab
    costs = {}
    for fused in (True, False):
        forward = head_forward(model, Sharding(micro_batch=1, seq_len=4096, fused_loss=fused))
        loss = next(op for op in forward.ops if op.name == "cross_entropy")
        loss_bwd = next(op for op in backward_of(forward).ops if op.name == "cross_entropy.bwd")
        costs[fused] = (loss.bytes_moved / logits, loss_bwd.bytes_moved / logits, loss.saved_bytes / logits)
    assert costs[True] == (6.0, 4.0, 2.0)     # one fused kernel on bf16 logits
    assert costs[False] == (38.0, 14.0, 4.0)  # Megatron-LM's PyTorch ops on an fp32 copy
    assert shard.fused_loss


def test_unfused_loss_never_speeds_up_a_step():
    kwargs = dict(seq_len=4096, global_batch=64, plan="tp=1,pp=1,mbs=1,recompute=none,zero=1")
    fused = simulate_training("llama3-8b", "h100-sxm", 8, **kwargs)
    unfused = simulate_training("llama3-8b", "h100-sxm", 8, fused_loss=False, **kwargs)
    assert unfused.step_time_s > fused.step_time_s
    assert any("unfused fp32 cross-entropy" in a for a in unfused.assumptions)
