"""Activation memory per layer against Korthikanti et al. 2022 ('Reducing Activation Recomputation in Large
Transformer Models', Table 2), for a GPT-style layer with unfused attention and 16-bit activations.

s: sequence length, b: micro-batch, h: hidden, a: heads, t: tensor-parallel size.
"""

from __future__ import annotations

import pytest

from conftest import gpt_model
from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.train.layers import saved_activation_bytes

H, A = 1024, 16


def saved(mode: str, *, s: int, b: int, tp: int = 1, sp: bool = False) -> float:
    model = gpt_model(hidden=H, heads=A)
    graph = layer_forward(model, Sharding(tp=tp, sp=sp, seq_len=s, micro_batch=b, flash_attention=False), moe=False)
    return saved_activation_bytes(graph, mode)


@pytest.mark.parametrize("s,b", [(2048, 1), (1024, 4)])
def test_no_parallelism(s, b):
    """No TP, no recompute: s*b*h*(34 + 5*a*s/h) bytes."""
    assert saved("none", s=s, b=b) == pytest.approx(s * b * H * (34 + 5 * A * s / H), rel=0.01)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tensor_and_sequence_parallel(t):
    """TP + SP, no recompute: (34*s*b*h + 5*a*s^2*b) / t."""
    s, b = 2048, 2
    assert saved("none", s=s, b=b, tp=t, sp=True) == pytest.approx((34 * s * b * H + 5 * A * s * s * b) / t, rel=0.01)


@pytest.mark.parametrize("t", [2, 8])
def test_tensor_parallel_without_sp(t):
    """TP without SP: s*b*h*(10 + 24/t + 5*a*s/(h*t)) (norms, dropout masks and layer inputs are replicated)."""
    s, b = 2048, 1
    expected = s * b * H * (10 + 24 / t + 5 * A * s / (H * t))
    assert saved("none", s=s, b=b, tp=t, sp=False) == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("t", [1, 4, 8])
def test_selective_recompute_with_sp(t):
    """Selective recompute + SP: 34*s*b*h/t (the 5*a*s^2*b score tensors are recomputed)."""
    s, b = 2048, 2
    assert saved("selective", s=s, b=b, tp=t, sp=True) == pytest.approx(34 * s * b * H / t, rel=0.01)


def test_selective_recompute_without_sp():
    """Selective recompute, TP without SP: s*b*h*(10 + 24/t)."""
    s, b, t = 2048, 1, 4
    assert saved("selective", s=s, b=b, tp=t, sp=False) == pytest.approx(s * b * H * (10 + 24 / t), rel=0.01)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_full_recompute_with_sp(t):
    """Full recompute + SP: only the layer input, 2*s*b*h/t."""
    s, b = 2048, 2
    assert saved("full", s=s, b=b, tp=t, sp=True) == pytest.approx(2 * s * b * H / t, rel=0.01)


def test_flash_attention_stores_no_score_matrix():
    """With fused attention there is no a*s^2*b term: memory grows linearly in s, not quadratically."""
    model = gpt_model(hidden=H, heads=A)

    def flash(s: int) -> float:
        return saved_activation_bytes(layer_forward(model, Sharding(seq_len=s, flash_attention=True), moe=False), "none")

    assert flash(8192) == pytest.approx(4 * flash(2048), rel=0.01)
    assert flash(2048) < saved("none", s=2048, b=1)
