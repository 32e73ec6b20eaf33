"""windtunnel.capture: a PyTorch module traced into the same operator DAG (skipped without torch)."""

from __future__ import annotations

import pytest

import windtunnel
from windtunnel.specs.errors import WindtunnelError


def test_capture_without_torch_names_the_extra():
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(WindtunnelError, match=r"windtunnel\[torch\]"):
            windtunnel.capture(object(), ())
    else:
        pytest.skip("torch is installed; the capture itself is tested below")


def test_capture_of_an_mlp_counts_its_matmul_flops():
    torch = pytest.importorskip("torch")
    module = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    graph = windtunnel.capture(module, torch.zeros(32, 64), dynamic={"input_0": {0: "batch"}})
    imported = graph.imported(32)
    assert imported.forward_flops == pytest.approx(2 * 32 * (64 * 256 + 256 * 64))
    assert imported.parameters == pytest.approx(64 * 256 + 256 + 256 * 64 + 64)


def _modules(torch):
    """A small CNN (conv, grouped conv, batch norm, pooling, residual) and an attention block
    (embedding, layer norm, linear, view / transpose, scaled_dot_product_attention, GELU MLP)."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False, groups=2), nn.BatchNorm2d(c)

        def forward(self, x):
            return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.pool = nn.Conv2d(3, 16, 7, stride=2, padding=3), nn.MaxPool2d(3, 2, 1)
            self.blocks, self.avg, self.fc = nn.Sequential(Block(16), Block(16)), nn.AdaptiveAvgPool2d(1), nn.Linear(16, 10)

        def forward(self, x):
            return self.fc(torch.flatten(self.avg(self.blocks(self.pool(self.stem(x)))), 1))

    class Attention(nn.Module):
        def __init__(self, d=64, heads=4):
            super().__init__()
            self.emb, self.ln, self.heads = nn.Embedding(1000, d), nn.LayerNorm(d), heads
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, ids):
            x = self.emb(ids)
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln(x)).chunk(3, dim=-1)
            q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
            x = x + self.o(a)
            return x + self.ff(x)

    return [(CNN().eval(), torch.zeros(2, 3, 64, 64)), (Attention().eval(), torch.zeros(2, 32, dtype=torch.long))]


def test_fx_capture_matches_the_onnx_import_flops_and_kinds():
    torch = pytest.importorskip("torch")
    from windtunnel.graph.fx_capture import FxGraphModel

    for module, example in _modules(torch):
        fx = windtunnel.capture(module, example)  # method="fx" is the default
        onnx = windtunnel.capture(module, example, method="onnx")
        assert isinstance(fx, FxGraphModel)
        a, b = fx.imported(4), onnx.imported(4)
        assert a.forward_flops == pytest.approx(b.forward_flops, rel=0.02)
        kinds = {n.kind for n in a.nodes} - {"view", "memory"}
        assert kinds == {n.kind for n in b.nodes} - {"view", "memory"}
    cnn = windtunnel.capture(*_modules(torch)[0])
    assert {n.op_type for n in cnn.imported(1).nodes if n.kind == "conv"} == {"Conv"}


def test_fx_capture_binds_dynamic_dimensions_and_trains():
    torch = pytest.importorskip("torch")
    module, example = _modules(torch)[1]
    graph = windtunnel.capture(module, example, dynamic={"input_0": {0: "batch", 1: "seq"}}, batch_shape={"seq": 128})
    assert graph.imported(8).forward_flops == pytest.approx(8 * graph.imported(1).forward_flops)
    assert graph.summary()["batch_shape"] == {"seq": 128, "batch": 1}
    result = windtunnel.simulate_training(graph, "a100-80g", devices=8, seq_len=1, global_batch=64, plan="dp=4,tp=2")
    assert result.feasible and result.step_time_s > 0


def test_fx_capture_unsupported_operator_names_the_node():
    torch = pytest.importorskip("torch")

    class Spectral(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fft(x).real

    with pytest.raises(WindtunnelError, match=r"unsupported operator call_function .*fft.* at node 'fft_fft'"):
        windtunnel.capture(Spectral(), torch.zeros(4, 8))
    with pytest.raises(WindtunnelError, match="method"):
        windtunnel.capture(Spectral(), torch.zeros(4, 8), method="jit")


def test_fx_capture_shards_like_the_onnx_import_and_explains_shape_errors():
    torch = pytest.importorskip("torch")
    from windtunnel.graph.dag_parallel import build_forward

    mlp = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    graphs = [windtunnel.capture(mlp, torch.zeros(64, 256), method=m).imported(1) for m in ("fx", "onnx")]
    for imported in graphs:
        one, two = build_forward(imported, 1)[0], build_forward(imported, 2)[0]
        assert two.total("flops", kinds=("gemm",)) == pytest.approx(one.total("flops", kinds=("gemm",)) / 2)
    comms = [[(op.kind, op.bytes_moved) for op in build_forward(g, 2)[0].ops if op.is_comm] for g in graphs]
    assert comms[0] == comms[1] == [("all_reduce", 2.0 * 64 * 256)]
    with pytest.raises(WindtunnelError, match="Shape propagation of Linear failed.*reduction dim"):
        windtunnel.capture(torch.nn.Linear(4, 8), torch.zeros(2, 5))
