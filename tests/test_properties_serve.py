"""Invariants of serving and availability as property tests (issue 20, scope item 4).

Serving: with the same seed and a fixed request count, a traffic spec at twice the rate is the same
requests (same lengths, same order) arriving twice as close together, so their p50 TTFT never falls by
more than TTFT_NOISE (10%); when the lower rate already overloads the deployment, their mean TTFT (see the
test's comment). It may fall a little at light load, where the median TTFT is about one
prefill plus part of the iteration it lands beside: the arrival spacing changes which decode iterations
(and, with replicas, which instance) each prefill meets, and a batched prefill reads the weights once for
all its requests. The largest fall in 250 random cases was 5.9% (llama3-8b, two replicas, rate 1 -> 2). Availability: more
spare nodes and faster detection, restart and repair never lower availability or ETTR (Markov engine).
Derandomized, fixed example counts, no deadline: a few seconds in all.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from windtunnel.avail import make_scenario, solve_markov
from windtunnel.infer.api import simulate_serving

# (model, hardware, deployment): a dense and an MoE model, replicated, tensor/expert parallel, disaggregated.
DEPLOYMENTS = [
    ("llama3-8b", "h100-sxm", "mixed:tp=1,replicas=1"),
    ("llama3-8b", "a100-80g", "mixed:tp=2,replicas=2"),
    ("llama3-70b", "h100-sxm", "mixed:tp=8,replicas=1"),
    ("qwen3-30b-a3b", "h100-sxm", "mixed:tp=2,replicas=1"),
    ("mixtral-8x7b", "h100-sxm", "mixed:tp=4,replicas=1"),
    ("deepseek-v3", "h100-sxm", "mixed:ep=16,replicas=2"),
    ("llama3-70b", "h100-sxm", "prefill:tp=8,replicas=1;decode:tp=8,replicas=1"),
]
# Largest relative fall of p50 TTFT at twice the rate (same seed) that is scheduling noise, not a bug.
TTFT_NOISE = 0.10

PROPERTY = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(st.sampled_from(DEPLOYMENTS), st.sampled_from([1, 2, 5, 10, 20, 40]), st.integers(0, 5),
       st.sampled_from([300, 1000, 3000]), st.sampled_from([50, 200, 600]))
def test_higher_request_rate_never_lowers_p50_ttft_beyond_noise(deployment, rate, seed, prompt, output):
    model, hardware, dep = deployment
    runs = []
    for r in (rate, 2 * rate):
        traffic = f"poisson:rate={r},input=lognormal({prompt},0.8),output=lognormal({output},0.8),requests=120"
        runs.append(simulate_serving(model, hardware, dep, traffic, seed=seed))
    # Overloaded already at the lower rate, the queue drains at the service rate, and batched prefill
    # serves more requests per weight read the longer the queue: throughput rises with load, so the
    # median of a finite batch may fall (deepseek-v3 ep=16 x2 at 40 -> 80 req/s: p50 -20%) while its
    # mean still rises. There the property is stated on the mean.
    key = "mean" if runs[0].overloaded else "p50"
    low, high = (run.ttft_s[key] for run in runs)
    assert high >= low * (1 - TTFT_NOISE), (deployment, rate, seed, key, low, high)


AVAIL = settings(max_examples=40, deadline=None, derandomize=True, database=None)


@AVAIL
@given(st.sampled_from([256, 1024, 4096, 16384]), st.sampled_from(["restart-from-checkpoint", "hot-spare"]),
       st.integers(0, 8), st.sampled_from([10, 60, 300]), st.sampled_from([60, 600, 3600]),
       st.sampled_from([3600, 4 * 3600, 24 * 3600]), st.sampled_from([5, 30, 120]))
def test_more_spares_and_faster_recovery_never_lower_availability(devices, kind, spares, detect, restart, repair,
                                                                   step):
    nodes = devices // 8
    spares = min(spares, nodes - 1)

    def solve(spares, detect, restart, repair):
        policy = f"{kind},detect={detect}s,restart={restart}s,repair={repair}s"
        if kind == "hot-spare":
            policy += f",spares={spares}"
        scenario = make_scenario(devices, "catalog:meta-rsc1", policy, step_time_s=step, horizon_s=30 * 86400)
        result = solve_markov(scenario)
        return result.availability, result.ettr

    base = solve(spares, detect, restart, repair)
    better = [solve(spares, detect / 2, restart, repair), solve(spares, detect, restart / 2, repair),
              solve(spares, detect, restart, repair / 2)]
    if kind == "hot-spare" and spares + 1 < nodes:
        better.append(solve(spares + 1, detect, restart, repair))
    for availability, ettr in better:
        assert availability >= base[0] - 1e-9 and ettr >= base[1] - 1e-9, (base, better)
