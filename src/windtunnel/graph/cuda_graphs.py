"""CUDA-graph capture of a layer's operator graph: which host costs a plan's ``cuda_graphs`` removes.

The graph builder (:mod:`windtunnel.graph.transformer`) marks each capturable region with its
Megatron-Core scope (:data:`windtunnel.specs.plan_checks.CUDA_GRAPH_SCOPES`); this module applies a plan's
choice to them.
"""

from __future__ import annotations

from dataclasses import replace

from windtunnel.graph.ops import OpGraph
from windtunnel.specs.plan_checks import cuda_graph_scopes

__all__ = ["captured"]


def captured(graph: OpGraph, graphed: list[tuple[str, range]], mode: str) -> OpGraph:
    """The graph with host costs as CUDA-graph capture leaves them.

    ``mode`` is a plan's ``cuda_graphs``; ``graphed`` names each capturable region by its scope. A captured
    region is replayed with one graph launch, so its host cost is one op and no library calls; the router
    and the dispatcher's preprocessing, when both are captured, are one graph (the dropless wait for the
    token counts after it stays). ``full`` captures everything, which needs a dropless dispatcher that
    sizes the all-to-all and the grouped GEMMs on the device, so the host never waits for token counts.
    """
    if mode == "none":
        return graph
    if mode == "full":
        return OpGraph([replace(op, host_ops=0.0, library_calls=0, quant_launches=0, host_sync=False)
                        for op in graph.ops])
    scopes = cuda_graph_scopes(mode)
    regions: list[tuple[str, range]] = []
    for scope, region in graphed:
        if scope not in scopes:
            continue
        if scope == "moe_preprocess" and regions and regions[-1][0] == "moe_router":
            regions[-1] = ("moe_router", range(regions[-1][1].start, region.stop))  # one graph with its router
        else:
            regions.append((scope, region))
    ops = list(graph.ops)
    for _, region in regions:
        for index in region:
            ops[index] = replace(ops[index], host_ops=1.0 if index == region.start else 0.0, library_calls=0,
                                   quant_launches=0)
    return OpGraph(ops)
