"""Capture a PyTorch module as an operator DAG (the optional ``[torch]`` extra).

``capture(module, example_inputs)`` traces the module with torch.fx (``method="fx"``, the default:
``symbolic_trace`` plus shape propagation on fake tensors, :mod:`windtunnel.graph.fx_capture`), or with
torch's ONNX exporter (``method="onnx"``: the module runs once on the example inputs, as
``torch.jit.trace`` does, into a temporary ONNX file imported as any ``.onnx`` file). Both give a
:class:`windtunnel.graph.graph_model.GraphModel` with the same operator kinds, so a captured model is
costed, sharded, served and searched exactly as an imported ``.onnx`` file. ``method="auto"`` uses fx
and falls back to the exporter when fx cannot trace the module (data-dependent control flow).
``dynamic`` names input dimensions that stay symbolic (``{"input_0": {0: "batch"}}``), to be bound
by ``batch_shape`` as for any ONNX model.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from windtunnel.specs.errors import WindtunnelError


def capture(module: Any, example_inputs: Any, *, method: str = "fx", dynamic: dict[str, dict[int, str]] | None = None,
            batch_shape: dict[str, int] | None = None, path: str | Path | None = None):
    """A GraphModel of ``module`` traced on ``example_inputs`` (a tensor or a tuple of tensors).

    ``method``: fx (default), onnx or auto (see the module doc). ``path``: where the onnx method keeps
    the ONNX file (default: a temporary directory that lives as long as the process). Raises a
    WindtunnelError naming the extra to install when torch is absent.
    """
    if method not in ("fx", "onnx", "auto"):
        raise WindtunnelError(f"Field 'method' is '{method}'; use fx (torch.fx trace), onnx (the ONNX exporter) or "
                              "auto (fx, else onnx).", field="method")
    try:
        import torch
    except ImportError:
        raise WindtunnelError("windtunnel.capture needs PyTorch: install the optional extra "
                              "(pip install 'windtunnel[torch]').", field="torch") from None
    from windtunnel.graph.graph_model import GraphModel

    if method in ("fx", "auto"):
        from windtunnel.graph.fx_capture import FxGraphModel, trace_module

        try:
            traced = trace_module(module)
        except WindtunnelError:
            if method == "fx":
                raise
        else:
            return FxGraphModel(module, example_inputs, dynamic=dynamic, batch_shape=batch_shape, traced=traced)
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    names = [f"input_{i}" for i in range(len(inputs))]
    target = Path(path) if path is not None else Path(tempfile.mkdtemp(prefix="windtunnel-capture-")) / "model.onnx"
    export = dict(input_names=names, dynamic_axes=dynamic or None, opset_version=17)
    try:
        torch.onnx.export(module, inputs, str(target), dynamo=False, **export)
    except TypeError:  # torch releases before the dynamo switch
        torch.onnx.export(module, inputs, str(target), **export)
    return GraphModel(target, batch_shape or {})
