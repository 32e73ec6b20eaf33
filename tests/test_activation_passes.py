"""The MLP activation's HBM traffic: a GLU reads both halves and writes half, GeLU reads and writes its
whole width; eager PyTorch SwiGLU is two kernels each way (graph/transformer.py _activation_passes)."""

from __future__ import annotations

import pytest

from windtunnel.graph.ops import backward_of
from windtunnel.graph.transformer import ACT_BYTES, Sharding, layer_forward
from windtunnel.specs.model import load_model

SEQ = 4096


def _act_traffic(model_id: str, fused: bool) -> tuple[float, float, float]:
    """(forward bytes, backward bytes, up-projection output elements) of the dense MLP activation."""
    model = load_model(model_id)
    graph = layer_forward(model, Sharding(seq_len=SEQ, fused_elementwise=fused), moe=False)
    act = next(op for op in graph.ops if op.name == "mlp.act")
    up = next(op for op in graph.ops if op.name == "mlp.up_proj")
    m, n, _ = up.shape
    backward = next(op for op in backward_of(graph).ops if op.name == "mlp.act.bwd")
    return act.bytes_moved, backward.bytes_moved, float(m * n)


@pytest.mark.parametrize("model_id, fused, forward_passes, backward_passes", [
    ("llama3-8b", True, 1.5, 2.5),    # fused SwiGLU: read both halves, write the product; back: 0.5 + 1 + 1
    ("llama3-8b", False, 2.5, 4.0),   # eager: SiLU then the product; back: the product's 2.5 + SiLU's 1.5
    ("gpt3-175b", True, 2.0, 3.0),    # GeLU: read and write the full width; back: gradient, input, output
    ("gpt3-175b", False, 2.0, 3.0),   # eager GeLU is one kernel each way too
])
def test_activation_moves_what_its_kernels_read_and_write(model_id, fused, forward_passes, backward_passes):
    forward, backward, elements = _act_traffic(model_id, fused)
    assert forward == pytest.approx(forward_passes * ACT_BYTES * elements)
    assert backward == pytest.approx(backward_passes * ACT_BYTES * elements)


def test_backward_moves_under_twice_the_forward_and_a_glu_more_per_forward_pass_than_gelu():
    glu_forward, glu_backward, _ = _act_traffic("llama3-8b", True)
    gelu_forward, gelu_backward, _ = _act_traffic("gpt3-175b", True)
    assert glu_backward < 2.0 * glu_forward
    assert gelu_backward < 2.0 * gelu_forward
    assert glu_backward / glu_forward > gelu_backward / gelu_forward
