"""Playing one training step's pipeline on the event engine: every rank's schedule of forward and
backward blocks, their point-to-point sends, the data-parallel gradient reductions and parameter
gathers, and the optimizer step (a mixin of the step builder, train.step._StepBuilder).

The builder provides the played chunk costs (``chunks()``, ``fused()``), the resolved plan and
placement, and the collective times of data parallelism; this module turns them into engine tasks.
Times are seconds.
"""

from __future__ import annotations

from typing import Any

from windtunnel.cost.collectives import p2p_time
from windtunnel.engine.core import Engine, Timeline
from windtunnel.graph.transformer import ACT_BYTES
from windtunnel.specs.errors import WindtunnelError
from windtunnel.train.offload_optimizer import rank_step_seconds
from windtunnel.train.schedule import Block, schedule_orders


class PipelinePlay:
    """Engine submission of a step's pipeline schedule (mixed into the step builder)."""

    plan: Any
    job: Any
    schedule: str
    placement: Any
    eff: Any
    chip: Any
    states: Any
    micro_batches: int

    def run(self) -> tuple[Timeline, dict[tuple[int, int], Any], list[float]]:
        """Play the step: (timeline, the chunks by (rank, chunk), model FLOPs per rank)."""
        plan, cluster = self.plan, self.job.cluster
        chunks = self.chunks()
        orders = schedule_orders(self.schedule, plan.pp, plan.vpp, self.micro_batches, ep_overlap=plan.ep_overlap)
        engine = Engine()
        self._deferred_syncs: list[tuple[int, Any]] = []
        p2p_bytes = ACT_BYTES * plan.mbs * self.job.seq_len // plan.cp * self.job.model.hidden
        if plan.sequence_parallel:
            p2p_bytes /= plan.tp  # scatter-gather optimisation: each TP rank sends its shard
        p2p = p2p_time(p2p_bytes, self.placement.pp_tier, cluster, self.eff) if plan.pp > 1 else 0.0

        def neighbour(chunk: Any, step: int) -> tuple[int, int]:
            position = chunk.position + step
            if self.schedule == "dualpipe":
                rank = position if chunk.chunk == 0 else plan.pp - 1 - position
                return rank, chunk.chunk
            return position % plan.pp, position // plan.pp

        gathers: dict[tuple[int, int], list[int]] = {}
        if plan.zero in (1, 2) and self.placement.dp_active:
            # The previous step's parameter all-gather overlaps this step's first forward pass,
            # bucket by bucket: each layer waits only for its own parameters.
            for key, chunk in sorted(chunks.items()):
                gathers[key] = [
                    engine.task(f"param_gather c{key[1]} L{i}", f"r{key[0]}.dp", self.param_gather_time(dense, expert),
                                (), category="dp_comm")
                    for i, (dense, expert) in enumerate(reversed(chunk.bucket_params))
                ]
            if not plan.overlap_param_gather:
                # Without --overlap-param-gather the all-gather is synchronous: no forward starts before it ends.
                for key in gathers:
                    whole = [t for k, ts in gathers.items() if k[0] == key[0] for t in ts]
                    gathers[key] = [max(whole)] * len(gathers[key])

        last_backward: dict[tuple[int, int], int] = {}
        for rank, order in enumerate(orders):
            for index, block in enumerate(order):
                # A chunk's gradients are whole after its last backward, or its last deferred weight gradient.
                if block.kind in ("B", "FB", "W"):
                    ch = block.partner[1] if block.kind == "FB" else block.chunk
                    last_backward[(rank, ch)] = index

        sends_f: dict[tuple[int, int, int], int] = {}
        sends_b: dict[tuple[int, int, int], int] = {}
        forward_task: dict[tuple[int, int, int], int] = {}
        dp_tasks: dict[int, list[int]] = {rank: [] for rank in range(plan.pp)}
        flops = [0.0] * plan.pp
        pending = [list(enumerate(order)) for order in orders]
        # Submit in rounds across ranks so that every dependency refers to an already-submitted task.
        positions = [0] * plan.pp
        progress = True
        while progress:
            progress = False
            for rank in range(plan.pp):
                while positions[rank] < len(pending[rank]):
                    index, block = pending[rank][positions[rank]]
                    deps = self._block_deps(block, rank, chunks, neighbour, sends_f, sends_b, forward_task, gathers)
                    if deps is None:
                        break
                    self._submit(engine, block, index, rank, deps, chunks, neighbour, p2p, sends_f, sends_b,
                                 forward_task, last_backward, dp_tasks, flops, gathers)
                    positions[rank] += 1
                    progress = True
        if any(positions[r] < len(pending[r]) for r in range(plan.pp)):
            raise WindtunnelError("Pipeline schedule deadlock: a block waits for one that never runs.")
        last: dict[str, int] = {}
        for index, stream in enumerate(engine.streams):
            last[stream] = index
        for rank, chunk in self._deferred_syncs:
            # Without --overlap-grad-reduce every bucket is reduced after the rank's whole backward.
            self._dp_sync(engine, chunk, [last[f"r{rank}"]] * len(chunk.bucket_params), rank, dp_tasks, deferred=False)
        # Gradient-norm all-reduce makes the optimizer step a global synchronisation point.
        finals = [t for rank in range(plan.pp) for t in dp_tasks[rank]]
        finals += [last[f"r{rank}"] for rank in range(plan.pp) if f"r{rank}" in last]
        for rank in range(plan.pp):
            duration = rank_step_seconds(self, chunks, rank)
            engine.task("optimizer", f"r{rank}", duration + self.eff.kernel_overhead_s, finals, category="optimizer")
        return engine.run(), chunks, flops

    def _block_deps(self, block: Block, rank: int, chunks, neighbour, sends_f, sends_b, forward_task, gathers):
        deps: list[int] = []
        items = []
        if block.kind in ("F", "FB"):
            items.append(("F", block.micro_batch, block.chunk))
        if block.kind in ("B", "D"):
            items.append(("B", block.micro_batch, block.chunk))
        if block.kind == "FB":
            items.append(("B", *block.partner))
        for kind, mb, ch in items:
            chunk = chunks[(rank, ch)]
            if kind == "F":
                if chunk.position > 0:
                    prev = neighbour(chunk, -1)
                    if (mb, *prev) not in sends_f:
                        return None
                    deps.append(sends_f[(mb, *prev)])
                if mb == 0 and (rank, ch) in gathers and block.kind == "FB":
                    deps.extend(gathers[(rank, ch)])
            else:
                if (mb, rank, ch) not in forward_task:
                    return None
                deps.append(forward_task[(mb, rank, ch)])
                if chunk.position < chunk.path_length - 1:
                    nxt = neighbour(chunk, 1)
                    if (mb, *nxt) not in sends_b:
                        return None
                    deps.append(sends_b[(mb, *nxt)])
        return deps

    def _submit(self, engine, block, index, rank, deps, chunks, neighbour, p2p, sends_f, sends_b, forward_task,
                last_backward, dp_tasks, flops, gathers) -> None:
        plan = self.plan
        stream = f"r{rank}"
        if block.kind in ("D", "W"):
            # Zero-bubble halves of a backward: D (input gradients) sends its gradient on; W (weight
            # gradients) follows its D on the rank's stream and may complete the chunk's gradients.
            chunk = chunks[(rank, block.chunk)]
            played = chunk.dgrad if block.kind == "D" else chunk.wgrad
            task = engine.task(f"{block.kind} mb{block.micro_batch} c{block.chunk}", stream, played.time, deps,
                               parts=played.parts)
            flops[rank] += played.flops
            if block.kind == "D":
                self._after_backward(engine, chunk, block.micro_batch, [task], p2p, sends_b, rank)
            elif last_backward.get((rank, block.chunk)) == index:
                self._dp_sync(engine, chunk, [task] * len(chunk.bucket_params), rank, dp_tasks)
            return
        if block.kind == "F":
            chunk = chunks[(rank, block.chunk)]
            if block.micro_batch == 0 and (rank, block.chunk) in gathers:
                task = None
                for i, (piece, gather) in enumerate(zip(chunk.forward_pieces, gathers[(rank, block.chunk)], strict=True)):
                    task = engine.task(f"F mb0 c{block.chunk} L{i}", stream, piece.time,
                                       [*deps, gather] if i == 0 else [task, gather], parts=piece.parts)
            else:
                task = engine.task(f"F mb{block.micro_batch} c{block.chunk}", stream, chunk.forward.time, deps,
                                   parts=chunk.forward.parts)
            flops[rank] += chunk.forward.flops
            self._after_forward(engine, chunk, block.micro_batch, task, p2p, sends_f, forward_task, rank)
            return
        if block.kind == "FB":
            fchunk = chunks[(rank, block.chunk)]
            bmb, bch = block.partner
            bchunk = chunks[(rank, bch)]
            played = self.fused([k for k in fchunk.layers], [k for k in reversed(bchunk.layers)],
                                list(reversed(bchunk.modes)))
            task = engine.task(f"F mb{block.micro_batch} c{block.chunk} + B mb{bmb} c{bch}", stream, played.time, deps,
                               parts=played.parts)
            flops[rank] += played.flops
            self._after_forward(engine, fchunk, block.micro_batch, task, p2p, sends_f, forward_task, rank)
            self._after_backward(engine, bchunk, bmb, [task], p2p, sends_b, rank)
            if last_backward.get((rank, bch)) == index:
                self._dp_sync(engine, bchunk, [task] * len(bchunk.bucket_params), rank, dp_tasks)
            return
        chunk = chunks[(rank, block.chunk)]
        flops[rank] += chunk.backward.flops
        is_last = last_backward.get((rank, block.chunk)) == index
        needs_sync = plan.zero <= 1 and self.placement.dp_active
        if is_last and needs_sync:
            # The last micro-batch's backward is played layer by layer so that each layer's
            # gradient bucket starts reducing while earlier layers still compute.
            tasks = []
            for i, piece in enumerate(chunk.backward_pieces):
                tasks.append(engine.task(f"B mb{block.micro_batch} c{block.chunk} L{i}", stream, piece.time,
                                         deps if i == 0 else [tasks[-1]], parts=piece.parts))
            self._after_backward(engine, chunk, block.micro_batch, tasks, p2p, sends_b, rank)
            self._dp_sync(engine, chunk, tasks, rank, dp_tasks)
            return
        task = engine.task(f"B mb{block.micro_batch} c{block.chunk}", stream, chunk.backward.time, deps,
                           parts=chunk.backward.parts)
        self._after_backward(engine, chunk, block.micro_batch, [task], p2p, sends_b, rank)

    def _after_forward(self, engine, chunk, mb, task, p2p, sends_f, forward_task, rank) -> None:
        forward_task[(mb, rank, chunk.chunk)] = task
        if chunk.position < chunk.path_length - 1:
            sends_f[(mb, rank, chunk.chunk)] = engine.task(f"send F mb{mb}", f"r{rank}.pp", p2p, [task],
                                                           category="pp_comm")

    def _after_backward(self, engine, chunk, mb, tasks, p2p, sends_b, rank) -> None:
        if chunk.position > 0:
            sends_b[(mb, rank, chunk.chunk)] = engine.task(f"send B mb{mb}", f"r{rank}.pp", p2p, [tasks[-1]],
                                                           category="pp_comm")

    def _dp_sync(self, engine, chunk, tasks, rank, dp_tasks, deferred: bool = True) -> None:
        if self.plan.zero >= 2:
            return
        if deferred and not self.plan.overlap_grad_reduce:
            self._deferred_syncs.append((rank, chunk))
            return
        for (dense, expert), task in zip(chunk.bucket_params, tasks, strict=False):
            duration = self.dp_bucket_time(dense, expert)
            dp_tasks[rank].append(engine.task("grad_sync", f"r{rank}.dp", duration, [task], category="dp_comm"))
