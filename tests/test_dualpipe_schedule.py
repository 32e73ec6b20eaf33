"""DualPipe as deepseek-ai/DualPipe runs it (dualpipe.py DualPipe.step() at 3da1bbe; DeepSeek-V3 report
arXiv:2412.19437 Sec. 3.2.1, Table 2): the eight-step block order, the zero-bubble split of a backward into
its input gradients (D) and deferred weight gradients (W), the bubble of the paper's formula, and the
overlapped pair that hides one chunk's all-to-all under the other's compute."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from windtunnel.insight import training_job
from windtunnel.train import steady_play
from windtunnel.train.chunks import _Chunk
from windtunnel.train.layers import Played, backward_with_recompute, split_weight_gradients
from windtunnel.train.schedule import Block, dualpipe, dualpipe_greedy
from windtunnel.train.step import _StepBuilder

DSV3 = dict(seq_len=4096, global_batch=15360)
DSV3_PLAN = ("tp=1,pp=16,ep=64,precision=fp8,mtp=1,schedule=dualpipe,dispatcher=deepep,fp8_dispatch=true,"
             "recompute_modules=layernorm+mla_up_proj+moe_act,moments=bf16,act_fp8_store=true")


def spelled(order: list[Block], count: int) -> str:
    return " ".join(f"{b.kind}{b.micro_batch}" + (f"/{b.partner[0]}" if b.partner else "") for b in order[:count])


def test_orders_of_the_readme_figure():
    """The README's example (8 ranks, 20 micro-batches): device 0 runs seven forwards of its own direction,
    one of the reverse one, three (backward for input, backward for weights, forward) of the reverse
    direction, then overlapped pairs; a middle device runs its first pair apart. Here even micro-batches
    run down (chunk 0), odd ones up (chunk 1)."""
    orders = dualpipe(8, 20)
    assert spelled(orders[0], 18) == "F0 F2 F4 F6 F8 F10 F12 F1 D1 W1 F3 D3 W3 F5 D5 W5 F7 FB14/7"
    assert spelled(orders[7], 18) == "F1 F3 F5 F7 F9 F11 F13 F0 D0 W0 F2 D2 W2 F4 D4 W4 F6 FB15/6"
    assert spelled(orders[3], 11) == "F0 F1 F2 F3 F4 F5 F6 F7 F8 B1 FB9/0"
    # Cool-down of device 0 (steps 6-8): a backward of each phase, the second half zero-bubble; then its W's.
    assert spelled(orders[0][-8:], 8) == "D12 W12 D14 W14 D16 W16 D18 W18"


@pytest.mark.parametrize("pp,micro_batches", [(2, 4), (4, 8), (4, 20), (8, 16), (8, 20), (16, 32), (16, 120)])
def test_step_counts_follow_dualpipe_step(pp, micro_batches):
    """Per rank at distance h from an end: (pp/2-h-1) D/W in warm-up and in cool-down and h+1 in step 6
    (so 2(pp/2-h-1)+h+1 of each), every W after its D in first-in-first-out order, and every micro-batch's
    forward and backward once, on chunk mb % 2."""
    for rank, order in enumerate(dualpipe(pp, micro_batches)):
        h = min(rank, pp - 1 - rank)
        d = [(b.micro_batch, b.chunk) for b in order if b.kind == "D"]
        w = [(b.micro_batch, b.chunk) for b in order if b.kind == "W"]
        assert len(d) == 2 * (pp // 2 - h - 1) + h + 1 and w == d
        for mb, chunk in d:
            assert order.index(Block("D", mb, chunk)) < order.index(Block("W", mb, chunk))
        forwards = sorted((b.micro_batch, b.chunk) for b in order if b.kind in ("F", "FB"))
        backwards = sorted([(b.micro_batch, b.chunk) for b in order if b.kind in ("B", "D")]
                           + [b.partner for b in order if b.kind == "FB"])
        assert forwards == backwards == [(mb, mb % 2) for mb in range(micro_batches)]


def test_counts_dualpipe_does_not_run_keep_the_greedy_order():
    """DualPipe asserts an even count of at least 2 pp micro-batches; the engine still plays the others."""
    assert dualpipe(8, 9) == dualpipe_greedy(8, 9)
    assert dualpipe(8, 12) == dualpipe_greedy(8, 12)
    assert all(b.kind in ("F", "B", "FB") for order in dualpipe(8, 12) for b in order)


def _play(pp: int, micro_batches: int, f: float, b: float, w: float, fb: float, monkeypatch) -> steady_play.StepPlay:
    """The compiled play of a DualPipe step whose every chunk takes f (forward), b (full backward), w (its
    weight gradients; b - w for the input gradients) and fb (an overlapped pair) seconds, free P2P and DP."""
    monkeypatch.setattr(steady_play, "p2p_time", lambda *args: 0.0)
    chunks = {}
    for rank in range(pp):
        for chunk in (0, 1):
            chunks[(rank, chunk)] = _Chunk(
                rank, chunk, rank if chunk == 0 else pp - 1 - rank, pp, ["moe"], forward=Played(f, {"compute": f}),
                backward=Played(b, {"compute": b}), dgrad=Played(b - w, {"compute": b - w}),
                wgrad=Played(w, {"compute": w}), bucket_params=[(0.0, 0.0)], modes=["none"])
    plan = SimpleNamespace(pp=pp, vpp=1, ep_overlap=False, mbs=1, cp=1, sequence_parallel=False, tp=1, zero=0,
                           offload_optimizer=0.0)
    builder = SimpleNamespace(
        plan=plan, schedule="dualpipe", job=SimpleNamespace(cluster=None, seq_len=1, model=SimpleNamespace(hidden=1)),
        placement=SimpleNamespace(pp_tier=None, dp=SimpleNamespace(size=1), expert_dp=SimpleNamespace(size=1),
                                  dp_active=False),
        eff=SimpleNamespace(optimizer_bytes_per_param=0.0, memory_bandwidth=1.0, kernel_overhead_s=0.0),
        dp_bucket_time=lambda dense, expert: 0.0, param_gather_time=lambda dense, expert: 0.0,
        fused=lambda *args: Played(fb, {"compute": fb}), states=SimpleNamespace(optimizer_traffic=lambda x: 0.0),
        chip=SimpleNamespace(hbm_bandwidth=1.0))
    return steady_play.play_compiled(builder, chunks, micro_batches)


def _idle(play: steady_play.StepPlay) -> list[float]:
    return [play.makespan - sum(e - s for s, e in zip(r.starts, r.ends, strict=True)) for r in play.ranks]


# (F, B, W, F&B) with F = B - W, the zero-bubble unit costs the formula is written for.
COSTS = [(1.0, 2.0, 1.0, 3.0), (1.0, 2.0, 1.0, 2.5), (1.5, 2.5, 1.0, 3.2), (1.0, 1.6, 0.6, 2.2)]


@pytest.mark.parametrize("pp,micro_batches", [(4, 8), (8, 20), (8, 40), (16, 32), (16, 120)])
@pytest.mark.parametrize("costs", COSTS)
def test_bubble_is_the_papers_formula(pp, micro_batches, costs, monkeypatch):
    """DeepSeek-V3 Table 2 / DualPipe README: the bubble is (PP/2-1)(F&B + B - 3W), whatever the number of
    micro-batches; it is the idle time of the ranks that idle most (the middle ones; the end ranks run
    more of their work unpaired instead). Without overlap (F&B = F + B) the step is m F&B plus the bubble."""
    f, b, w, fb = costs
    play = _play(pp, micro_batches, f, b, w, fb, monkeypatch)
    formula = (pp / 2 - 1) * (fb + b - 3 * w)
    assert max(_idle(play)) == pytest.approx(formula, abs=1e-9)
    if fb == f + b:
        assert play.makespan == pytest.approx(micro_batches * fb + formula, abs=1e-9)


def test_the_greedy_order_idles_like_1f1b(monkeypatch):
    """What the engine played before for every count (the greedy order, no W split): for the same costs
    it idles (PP-1)(F+B)-like, three times DualPipe's bubble at 8 ranks; its W-less backwards cannot fill
    the cool-down."""
    costs = (1.0, 2.0, 1.0, 3.0)
    exact = max(_idle(_play(8, 40, *costs, monkeypatch)))
    monkeypatch.setattr(steady_play, "schedule_orders", lambda name, pp, vpp, mb, ep_overlap=False:
                        dualpipe_greedy(pp, mb))
    greedy = max(_idle(_play(8, 40, *costs, monkeypatch)))
    assert exact == pytest.approx((8 / 2 - 1) * (3.0 + 2.0 - 3 * 1.0))
    assert greedy >= 3 * exact


def test_split_weight_gradients_keeps_the_backward_whole():
    """D holds every operator but the weight gradients (recomputation included), W exactly those, with the
    same FLOPs in all; nothing in D waits for a W operator."""
    builder = _StepBuilder(training_job("deepseek-v3", "h800", 2048, plan=DSV3_PLAN, **DSV3))
    for graph in backward_with_recompute(builder.forward_graphs["moe"], "selective[layernorm+mla_up_proj+moe_act]"):
        inputs, weights = split_weight_gradients(graph)
        assert len(inputs) + len(weights) == len(graph) and len(weights) > 0
        assert all(op.weight_grad for op in weights.ops) and not any(op.weight_grad for op in inputs.ops)
        assert any(op.phase == "recompute" for op in inputs.ops)
        assert inputs.total("flops") + weights.total("flops") == pytest.approx(graph.total("flops"))


def test_the_pair_hides_each_chunks_all_to_all_under_the_others_compute():
    """DeepSeek-V3 (PP16 EP64 on H800): a middle rank's chunk alone leaves its dispatch and combine exposed
    (nothing else to run), the overlapped pair of two such chunks hides nearly all of both, because each
    chunk's compute exceeds the other's all-to-all; the pair is faster than the two chunks apart."""
    builder = _StepBuilder(training_job("deepseek-v3", "h800", 2048, plan=DSV3_PLAN, **DSV3))
    chunks = builder.chunks()
    forward, backward = chunks[(7, 0)], chunks[(7, 1)]
    apart = forward.forward.parts["ep_comm"] + backward.backward.parts["ep_comm"]
    pair = builder.fused(list(forward.layers), list(reversed(backward.layers)), list(reversed(backward.modes)))
    assert forward.forward.parts["ep_comm"] > 0.5 * forward.forward.parts["compute"]  # about 1:1, as Sec. 3.2.1 says
    assert pair.parts.get("ep_comm", 0.0) < 0.1 * apart
    assert pair.time < forward.forward.time + backward.backward.time


def test_op_trace_expands_the_zero_bubble_blocks():
    """`--trace-detail op` lays the layers' operators into D and W blocks too: a W block holds only weight
    gradients, a D block none of them."""
    import dataclasses

    from windtunnel.train.op_trace import op_events
    from windtunnel.train.step import simulate

    job = training_job("mixtral-8x7b", "h100-sxm", 16, seq_len=2048, global_batch=32,
                       plan="tp=1,pp=4,ep=4,mbs=1,zero=1,schedule=dualpipe")
    result = simulate(dataclasses.replace(job, keep_trace=True))
    events, summary = op_events(job, result.trace, rank=0, micro_batches=16)
    d = [e for e in events if e.block.startswith("D ") and e.stream == "compute"]
    w = [e for e in events if e.block.startswith("W ") and e.stream == "compute"]
    assert d and w and summary["blocks_whole"] == 0
    assert all(e.name.endswith(".wgrad") for e in w) and not any(e.name.endswith(".wgrad") for e in d)
