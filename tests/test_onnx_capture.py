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
