"""The serving deployment search's space (:mod:`windtunnel.infer.search`).

The space (fixed grids, so a larger budget's candidates contain a smaller budget's):

* instance shapes - dense models: tensor parallel 1, 2, 4, 8 (within a node); MoE models: TP 8 with the
  experts on the same 8 devices, and data-parallel attention with expert parallelism over 8 to 256
  devices (tp=1, dp=ep=N; two-batch overlap when the EP group spans nodes);
* co-located (mixed) pools: a shape, a replica count and a prefill chunk size (per attention group);
* disaggregated pools: a prefill shape and count, a decode shape and count (the prefill:decode ratio), and
  a decode batch limit;
* replica counts from a fixed grid (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, ...), every combination
  within the budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from windtunnel.infer.deployment import Deployment, InstanceSpec
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.model import ModelSpec

REPLICA_GRID = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 384, 512)
MODES = ("both", "disaggregated", "colocated")


@dataclass(frozen=True)
class Shape:
    """An instance shape: parallel plan keys and devices per instance."""

    tp: int
    dp: int = 1
    ep: int | None = None
    tbo: bool = False

    @property
    def devices(self) -> int:
        return self.tp * self.dp

    def keys(self) -> dict:
        keys = {"tp": self.tp}
        if self.dp > 1:
            keys["dp"] = self.dp
        if self.ep is not None:
            keys["ep"] = self.ep
        if self.tbo:
            keys["tbo"] = True
        return keys


def shapes_for(model: ModelSpec, node: int, budget: int) -> list[Shape]:
    """Instance shapes of the space for ``model`` on nodes of ``node`` devices, at most ``budget`` devices."""
    out: list[Shape] = []
    if model.moe is None:
        for tp in (1, 2, 4, 8):
            if tp <= node and model.heads % tp == 0 and tp <= budget:
                out.append(Shape(tp=tp))
        return out
    if budget >= 8 and model.heads % 8 == 0 and node >= 8:
        out.append(Shape(tp=8, ep=8))
    for n in (8, 16, 32, 64, 128, 256):
        if n <= budget and n <= model.moe.experts:
            out.append(Shape(tp=1, dp=n, ep=n, tbo=n > node))
    return out


def _spec(role: str, shape: Shape, replicas: int, **extra) -> InstanceSpec:
    return InstanceSpec(role=role, replicas=replicas, **shape.keys(), **extra)


def candidates(model: ModelSpec, hardware: str, budget: int, mode: str = "both") -> list[tuple[str, Deployment]]:
    """Every candidate deployment within ``budget`` devices, in a deterministic order."""
    if mode not in MODES:
        raise WindtunnelError(f"Field 'mode' is '{mode}'; valid: {', '.join(MODES)}.", field="mode")
    node = load_hardware(hardware, 1).node_size
    shapes = shapes_for(model, node, budget)
    out: list[tuple[str, Deployment]] = []
    if mode in ("both", "colocated"):
        for shape in shapes:
            for replicas in REPLICA_GRID:
                if replicas * shape.devices > budget:
                    break
                for chunk in (2048, 8192):
                    spec = _spec("mixed", shape, replicas, max_tokens=chunk)
                    out.append(("colocated", Deployment(groups=(spec,))))
    if mode in ("both", "disaggregated"):
        prefill_shapes = [s for s in shapes if s.devices <= 64]
        for p_shape in prefill_shapes:
            for d_shape in shapes:
                for n_p in REPLICA_GRID:
                    if n_p * p_shape.devices + d_shape.devices > budget:
                        break
                    for n_d in REPLICA_GRID:
                        if n_p * p_shape.devices + n_d * d_shape.devices > budget:
                            break
                        for decode_batch in (128, 512):
                            groups = (_spec("prefill", p_shape, n_p, max_tokens=16384),
                                      _spec("decode", d_shape, n_d, max_batch=decode_batch))
                            out.append(("disaggregated", Deployment(groups=groups)))
    return out
