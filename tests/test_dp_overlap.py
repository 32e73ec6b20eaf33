"""Data parallelism's overlap (Megatron's --overlap-grad-reduce / --overlap-param-gather): plan fields with
stack defaults, and what turning each off exposes in the step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from windtunnel.api import simulate_training
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.model import load_model
from windtunnel.specs.plan import parse_plan
from windtunnel.specs.stack import load_stack
from windtunnel.train.step import TrainingJob, simulate

# A data-parallel-heavy step: 32 ranks of DP over two nodes and few micro-batches, so the gradient
# reduce-scatter and the parameter all-gather are long next to the compute that could hide them.
KWARGS = dict(model="llama3-8b", hardware="ascend-910b", devices=32, seq_len=4096, global_batch=64,
              framework="megatron")
BASE = "tp=1,pp=2,mbs=1,zero=1"


def _step(extra: str = "") -> float:
    return simulate_training(plan=BASE + extra, **KWARGS).step_time_s


def test_overlap_fields_parse_print_and_default_to_the_stack():
    plan = parse_plan("tp=2,overlap-grad-reduce=false,overlap_param_gather=0")
    assert not plan.overlap_grad_reduce and not plan.overlap_param_gather
    assert "overlap_grad_reduce=false" in plan.short() and "overlap_param_gather=false" in plan.short()
    assert parse_plan("tp=2").overlap_grad_reduce and "overlap" not in parse_plan("tp=2").short()
    # MindSpeed-LLM's example scripts mostly pass neither flag; Megatron-style recipes keep both on.
    assert not load_stack("mindspeed").comm.overlap_grad_reduce
    assert not load_stack("mindspeed").comm.overlap_param_gather
    assert load_stack("megatron").comm.overlap_grad_reduce and load_stack("megatron").comm.overlap_param_gather
    result = simulate_training(plan=BASE, **{**KWARGS, "framework": "mindspeed"})
    assert "overlap_grad_reduce=false" in result.plan and "overlap_param_gather=false" in result.plan


def test_unoverlapped_gradient_reduction_and_parameter_gather_lengthen_the_step():
    both = _step()
    no_grad = _step(",overlap_grad_reduce=false")
    no_gather = _step(",overlap_param_gather=false")
    neither = _step(",overlap_grad_reduce=false,overlap_param_gather=false")
    assert no_grad > both and no_gather > both
    assert neither > max(no_grad, no_gather)
    # each exposes what the overlapped step hid; together about the sum of the two
    assert neither - both == pytest.approx((no_grad - both) + (no_gather - both), rel=0.05)
    # the reduction waits for the whole backward: it is exposed as data-parallel communication
    overlapped = simulate_training(plan=BASE, **KWARGS).breakdown["dp_comm"]
    exposed = simulate_training(plan=BASE + ",overlap_grad_reduce=false", **KWARGS).breakdown["dp_comm"]
    assert exposed > overlapped


def test_steady_and_exact_plays_agree_without_overlap():
    model, cluster = load_model("llama3-8b"), load_hardware("ascend-910b", 32)
    for extra in ("", ",overlap_grad_reduce=false", ",overlap_param_gather=false",
                  ",pp=4,vpp=2,overlap_grad_reduce=false,overlap_param_gather=false"):
        plan = parse_plan("tp=1,mbs=1,zero=1" + (extra if "pp=" in extra else ",pp=2" + extra))
        job = TrainingJob(model=model, cluster=cluster, plan=plan, seq_len=4096, global_batch=64)
        steady, exact = simulate(job).step_time_s, simulate(replace(job, exact=True)).step_time_s
        assert steady == pytest.approx(exact, rel=1e-6), extra
