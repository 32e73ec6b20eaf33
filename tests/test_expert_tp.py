"""Expert tensor parallelism (plan etp = tp): each expert's FFN split over the TP group."""

from __future__ import annotations

import pytest

from windtunnel.api import simulate_training
from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.model import load_model

TP = 8


def _experts(graph):
    return [op for op in graph.ops if op.name.startswith("experts.") and op.kind == "gemm"]


def test_expert_tp_splits_the_width_gathers_the_tokens_and_keeps_the_work():
    model = load_model("mixtral-8x7b")
    plain = layer_forward(model, Sharding(tp=TP, sp=True, seq_len=4096), moe=True)
    split = layer_forward(model, Sharding(tp=TP, sp=True, etp=TP, seq_len=4096), moe=True)
    up_plain, up_split = _experts(plain)[0], _experts(split)[0]
    assert up_split.shape[0] == pytest.approx(up_plain.shape[0] * TP, rel=0.01)  # tokens gathered over TP
    assert up_split.shape[1] * TP == up_plain.shape[1]  # 1/etp of each expert's width
    assert sum(op.flops for op in _experts(split)) == pytest.approx(sum(op.flops for op in _experts(plain)), rel=0.01)
    comms = {op.name: op.kind for op in split.ops if op.stream == "tp" and op.name.startswith("expert_tp")}
    assert comms == {"expert_tp_gather": "all_gather", "expert_tp_scatter": "reduce_scatter"}


def test_expert_tp_collectives_are_not_overlapped_by_tp_comm_overlap():
    """Megatron-Core's expert linears communicate explicitly in the dispatcher (explicit_expert_comm), so TP
    communication overlap (TE userbuffers, MindSpeed MC2) chunks the attention and dense linears only."""
    from windtunnel.cost.efficiency import efficiency_for
    from windtunnel.specs.hardware import load_chip
    from windtunnel.train.layers import TP_OVERLAP_CHUNKS, LayerCoster

    model = load_model("mixtral-8x7b")
    graph = layer_forward(model, Sharding(tp=TP, sp=True, etp=TP, seq_len=4096), moe=True)
    coster = LayerCoster(None, None, efficiency_for(load_chip("h100-sxm")), "bf16", tp_overlap=True)
    pieces = dict(zip((op.name for op in graph.ops), coster._pieces(graph), strict=True))
    assert pieces["expert_tp_gather"] == pieces["expert_tp_scatter"] == 1
    assert pieces["experts.up_proj"] == pieces["experts.down_proj"] == 1
    overlapped = [name for name, n in pieces.items() if n == TP_OVERLAP_CHUNKS]
    assert overlapped and all(not name.startswith("expert") for name in overlapped)


def test_expert_tp_holds_a_tp_th_of_the_expert_weights():
    kwargs = dict(model="mixtral-8x7b", hardware="h100-sxm", devices=64, seq_len=4096, global_batch=64)
    whole = simulate_training(plan="tp=8,pp=4,mbs=1,recompute=full,sp=true", **kwargs)
    split = simulate_training(plan="tp=8,pp=4,etp=8,mbs=1,recompute=full,sp=true", **kwargs)
    assert split.peak_memory_bytes < whole.peak_memory_bytes
    assert whole.peak_memory_bytes - split.peak_memory_bytes > 0.5 * 2**30  # bytes: 7/8 of the expert states go


@pytest.mark.parametrize("plan,needle", [
    ("tp=8,pp=4,etp=4,mbs=1", "etp must be 1 or tp = 8"),
    ("tp=2,pp=1,etp=2,mbs=1", "no experts"),
])
def test_bad_expert_tp_is_one_clear_error(plan, needle):
    model = "mixtral-8x7b" if "etp=4" in plan else "llama3-8b"
    with pytest.raises(WindtunnelError) as info:
        simulate_training(model=model, hardware="h100-sxm", devices=32 if "pp=4" in plan else 8, seq_len=4096,
                          global_batch=32, plan=plan)
    assert needle in str(info.value) and "'etp'" in str(info.value)
