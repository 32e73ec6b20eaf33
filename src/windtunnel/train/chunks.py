"""A pipeline rank's model chunks: which layers each (rank, chunk) runs and their played costs.

The step builder mixes this in (train/step.py ``_StepBuilder``): it lays the model's modules over the
(virtual) pipeline stages, the plan's layout or the balanced split, and costs each chunk's forward and
backward pieces, the parameters each holds, its stored activations and the copies of offloaded ones.
Times are seconds, memory bytes, parameters counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from windtunnel.specs.layout import (
    BALANCED,
    LAYER_KINDS,
    balanced_stage_modules,
    layout_string,
    stage_modules,
)
from windtunnel.train.layers import ZERO, Played
from windtunnel.train.memory import layer_saved_bytes


@dataclass
class _Chunk:
    """The layers one rank runs for one model chunk, with their played costs."""

    rank: int
    chunk: int
    position: int
    path_length: int
    layers: list[str]
    forward: Played = field(default_factory=lambda: Played(0.0))
    backward: Played = field(default_factory=lambda: Played(0.0))
    forward_pieces: list[Played] = field(default_factory=list)
    backward_pieces: list[Played] = field(default_factory=list)
    dense_params: float = 0.0
    expert_params: float = 0.0
    bucket_params: list[tuple[float, float]] = field(default_factory=list)  # per backward piece (dense, expert)
    activation_bytes: float = 0.0
    offloaded_bytes: float = 0.0  # activations held in host memory (activation offloading)
    modes: list[str] = field(default_factory=list)
    # DualPipe's zero-bubble split of the backward (its "D" and "W" blocks): input gradients with
    # recomputation, and the deferred weight gradients.
    dgrad: Played = field(default_factory=lambda: Played(0.0))
    wgrad: Played = field(default_factory=lambda: Played(0.0))


class ChunkCosting:
    """Chunk layout and costing for a step builder (needs its plan, schedule, played costs and parameter
    counts: ``plan``, ``schedule``, ``job``, ``mtp``, ``dag_stages``, ``played``, ``recompute_modes``,
    ``layer_params``, ``chip``, ``eff`` and the ``_saved`` cache)."""

    def chunks(self) -> dict[tuple[int, int], _Chunk]:
        """Every (rank, chunk) of the schedule with its layers and played costs: DualPipe's two chunks per rank
        (stage r and its mirror), else the interleaved schedule's pp x vpp virtual stages."""
        plan = self.plan
        chunks: dict[tuple[int, int], _Chunk] = {}
        if self.schedule == "dualpipe":
            per_stage = self.stage_split(plan.pp, lambda s: min(s, plan.pp - 1 - s))
            for rank in range(plan.pp):
                for chunk in (0, 1):
                    stage = rank if chunk == 0 else plan.pp - 1 - rank
                    chunks[(rank, chunk)] = _Chunk(rank, chunk, stage, plan.pp, per_stage[stage])
        else:
            virtual = plan.pp * plan.vpp
            per_virtual = self.dag_stages or self.stage_split(virtual, lambda v: v % plan.pp)
            for v in range(virtual):
                rank, chunk = v % plan.pp, v // plan.pp
                chunks[(rank, chunk)] = _Chunk(rank, chunk, v, virtual, per_virtual[v])
        # An MTP module shares the embedding; a rank that holds the first stage has it at hand.
        with_embedding = {chunk.rank for chunk in chunks.values() if "embedding" in chunk.layers}
        for chunk in chunks.values():
            self._cost_chunk(chunk, shares_embedding=chunk.rank in with_embedding)
        return chunks

    def stage_split(self, stages: int, rank_of) -> list[list[str]]:
        """Module kinds per (virtual) stage: the plan's layout, the even split, or with layout=balanced the split
        that evens the busiest rank's forward + backward time per micro-batch (``rank_of``: stage -> rank)."""
        model, plan = self.job.model, self.plan
        if plan.layout != BALANCED:
            return stage_modules(model, plan.layout, stages, self.mtp)
        mode = self.recompute_modes(1)[0]

        def seconds(kind: str) -> float:
            backward = f"bwd-{mode}" if kind in LAYER_KINDS else "bwd-none"
            return self.played(kind, "fwd").time + self.played(kind, backward).time

        split = balanced_stage_modules(model, stages, self.mtp, seconds, rank_of)
        self.chosen_layout = layout_string(split)
        return split

    def _cost_chunk(self, chunk: _Chunk, *, shares_embedding: bool = False) -> None:
        modules = list(chunk.layers)
        layer_modes = iter(self.recompute_modes(sum(kind in LAYER_KINDS for kind in modules)))
        modes = [next(layer_modes) if kind in LAYER_KINDS else "none" for kind in modules]
        offloaded = self.offloaded_modules(modules)
        forward = ZERO
        pieces = []
        activations = staging = 0.0
        for index, (kind, mode) in enumerate(zip(modules, modes, strict=True)):
            if (kind, mode) not in self._saved:
                self._saved[(kind, mode)] = layer_saved_bytes(self, kind, mode)
            saved = self._saved[(kind, mode)]
            forward_piece, backward_piece = self.played(kind, "fwd"), self.played(kind, f"bwd-{mode}")
            if offloaded[index]:
                # The copy to host runs beside the next module's forward and the copy back beside its
                # backward (which comes first); only what they do not hide extends the step. One
                # layer's activations stay staged on the device while they travel.
                copy = saved / (self.chip.host_link_bandwidth * self.eff.host_link)
                after = modules[index + 1], modes[index + 1]
                out = max(0.0, copy - self.played(after[0], "fwd").time)
                back = max(0.0, copy - self.played(after[0], f"bwd-{after[1]}").time)
                forward_piece = forward_piece + Played(out, {"offload": out})
                backward_piece = backward_piece + Played(back, {"offload": back})
                chunk.offloaded_bytes += saved
                staging = max(staging, saved)
            elif (copy := self.checkpoint_copy_s(kind, mode)) is not None:
                # CPU checkpointing as the stack runs it ('blocking': DeepSpeed's synchronous copy on
                # the compute stream, out before the layer's forward, back before its recomputation):
                # each copy adds to its pass, nothing hides it. The checkpoint in transit is on the device.
                forward_piece = forward_piece + Played(copy, {"offload": copy})
                backward_piece = backward_piece + Played(copy, {"offload": copy})
                chunk.offloaded_bytes += saved
                staging = max(staging, saved)
            else:
                activations += saved
            chunk.forward_pieces.append(forward_piece)
            forward = forward + forward_piece
            pieces.append(backward_piece)
            dense, expert = self.layer_params(kind)
            if kind == "mtp_embedding" and shares_embedding:
                dense = 0.0  # the rank already holds the embedding the MTP module shares
            chunk.dense_params += dense
            chunk.expert_params += expert
            chunk.bucket_params.append((dense, expert))
        pieces.reverse()
        chunk.bucket_params.reverse()
        chunk.forward = forward
        chunk.backward_pieces = pieces
        total = ZERO
        for piece in pieces:
            total = total + piece
        chunk.backward = total
        chunk.activation_bytes = activations + staging
        chunk.layers = modules
        chunk.modes = modes
        if self.schedule == "dualpipe":
            for kind, mode in zip(modules, modes, strict=True):
                chunk.dgrad = chunk.dgrad + self.played(kind, f"dgrad-{mode}")
                chunk.wgrad = chunk.wgrad + self.played(kind, f"wgrad-{mode}")

    def checkpoint_copy_s(self, kind: str, mode: str) -> float | None:
        """Seconds of one copy (either way) of a layer's checkpoint under the plan's CPU checkpointing: its
        saved input at the chip's host link; None where the layer's checkpoint stays on the device."""
        if not (self.plan.checkpoint_in_cpu and mode == "full" and kind in LAYER_KINDS):
            return None
        if (kind, mode) not in self._saved:
            self._saved[(kind, mode)] = layer_saved_bytes(self, kind, mode)
        return self._saved[(kind, mode)] / (self.chip.host_link_bandwidth * self.eff.host_link)

    def offloaded_modules(self, modules: list[str]) -> list[bool]:
        """Which of a chunk's modules have their activations offloaded: the first offload_layers
        transformer layers of the model (offloading runs with pp=1, so the one chunk holds them all)."""
        remaining = self.plan.offload_layers
        flags = []
        for kind in modules:
            layer = kind in LAYER_KINDS
            flags.append(layer and remaining > 0)
            remaining -= 1 if layer else 0
        return flags
