"""Backward rules of the non-transformer operator kinds (conv, gather, sparse), per kind.

* conv: a data-gradient and a weight-gradient implicit GEMM, each with the forward's FLOPs (2x the
  forward in all, as for a dense matmul); the data gradient is what the previous operator waits for,
  the weight gradient is a sink. A convolution that reads the model input (``no_input_grad``) runs
  only the weight gradient (frameworks skip the image's gradient).
* gather (gathers, index, embedding lookups): a scatter-add of the output gradient into the source
  rows: the forward's bytes twice (read the gradient, read-modify-write the destination rows).
* bmm (many tiny matmuls): the gradients of both operands, each a batch of the same FLOPs and bytes
  (2x the forward).
* sparse (sparse-dense matmul, graph message passing): the transposed SpMM for the features'
  gradient, the forward's FLOPs and bytes once (a constant adjacency has no gradient).

Units: FLOPs, bytes, as in :mod:`windtunnel.graph.ops`.
"""

from __future__ import annotations

from dataclasses import replace

from windtunnel.graph.ops import Op, OpGraph, no_input_gradient

# Backward FLOPs over forward FLOPs, per kind (stated for `windtunnel graph show` and the docs).
BACKWARD_FLOPS_FACTOR = {"gemm": 2.0, "conv": 2.0, "bmm": 2.0, "attention": 2.5, "memory": 2.0, "gather": 0.0, "sparse": 1.0}


def kind_backward(backward: OpGraph, op: Op, base: dict) -> int:
    """Add the backward of ``op`` (a conv, bmm, gather or sparse operator) to ``backward``; returns the index
    the previous operator's backward waits for. ``base`` holds the fields every backward op shares
    (deps, phase, ...), as built by :func:`windtunnel.graph.ops.backward_of`."""
    if op.kind == "conv":
        m, n, k = op.shape
        wgrad = replace(op, name=op.name + ".wgrad", shape=(k, n, m), weight_grad=True, **base)
        if no_input_gradient(op):
            return backward.add(wgrad)
        index = backward.add(replace(op, name=op.name + ".dgrad", shape=(m, k, n), **base))
        backward.add(wgrad)
        return index
    if op.kind == "bmm":
        m, n, k = op.shape
        index = backward.add(replace(op, name=op.name + ".dgrad_a", shape=(m, k, n), **base))
        backward.add(replace(op, name=op.name + ".dgrad_b", shape=(k, n, m), **base))
        return index
    if op.kind == "gather":
        return backward.add(replace(op, name=op.name + ".bwd", bytes_moved=2.0 * op.bytes_moved, flops=0.0, **base))
    if op.kind == "sparse":
        return backward.add(replace(op, name=op.name + ".bwd", **base))
    raise ValueError(f"no backward rule for operator kind '{op.kind}'")
