"""A serving instance: continuous batching, chunked prefill, a paged KV cache, preemption (see infer.sim).

Scheduling (vLLM V1 / Sarathi-Serve style). Each instance iterates: every running decode sequence
contributes one token; with chunked prefill the rest of the iteration's token budget (``max_tokens``)
goes to prefill chunks, first of requests already being prefilled, then of newly admitted ones, in
arrival order (FCFS; a preempted request goes back to the head of the queue). Without chunked
prefill an iteration is either a prefill of whole prompts (admitted up to the token budget) or a
decode of the running batch, prefill first. A request is admitted when the running count is below
``max_batch`` and the KV cache has room for its whole context plus one page. When the decodes'
growth would overflow the cache, the most recently admitted sequence is preempted and later
recomputed (its prompt plus the tokens generated so far are prefilled again).

KV accounting: a sequence holds its context tokens plus one page (``block_size`` tokens), an upper
bound on what paged allocation uses (``ceil(tokens / block) x block``); usage never exceeds the
capacity the memory model gives.

Speed. Decode-only stretches are played as one event: while the batch does not change, iteration
j of the stretch takes ``alpha + beta * j`` seconds (context grows by the batch each iteration), so
the stretch up to the next completion (or KV exhaustion) is summed in closed form; an arrival at the
instance cuts the stretch at the first iteration boundary after it. Iteration costs are memoised per
token count (:mod:`windtunnel.infer.iteration`). Times are seconds, sizes tokens.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import TYPE_CHECKING

from windtunnel.infer.deployment import InstancePlan
from windtunnel.infer.iteration import IterationModel

if TYPE_CHECKING:  # pragma: no cover
    from windtunnel.infer.sim import Simulator

WAITING, PREFILLING, DECODING, DONE, MOVING, REJECTED = range(6)
EV_STEP, EV_ARRIVE, EV_CONTROL = 0, 1, 2


class Instance:
    """One serving instance: scheduler state, KV cache, and its iteration-time model."""

    def __init__(self, index: int, plan: InstancePlan, cost: IterationModel, sim: Simulator) -> None:
        self.index = index
        self.plan = plan
        self.role = plan.role
        self.cost = cost
        self.sim = sim
        self.cap = plan.kv_capacity_tokens
        self.block = plan.block_size
        self.max_batch = plan.max_batch
        self.max_tokens = plan.max_tokens
        self.chunked = plan.batching != "separate"
        self.whole = plan.batching == "whole"
        self.devices = plan.devices
        self.dp = plan.dp
        # TensorRT-LLM-style admission reserves each request's whole output up front and never preempts.
        self.reserve = plan.admission == "reserve" and plan.role != "prefill"
        self.future = 0
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []
        self.heap: list[tuple[int, int, int]] = []
        self.order: list[int] = []
        self.batch = 0
        self.ctx = 0
        self.kv = 0
        self.kv_max = 0
        self.step = 0
        self.outstanding = 0
        self.waiting_tokens = 0
        self.busy = False
        self.accepting = True
        self.draining = False
        self.version = 0
        self.t0 = 0.0
        self.k = 0
        self.alpha = 0.0
        self.beta = 0.0
        self.chunks: list[tuple[int, int]] | None = None
        self.decode_in = 0
        self.busy_time = 0.0
        self.sim_now = 0.0
        self.iterations = 0
        self.samples_t: list[float] = [0.0]
        self.samples_kv: list[int] = [0]
        self.samples_q: list[int] = [0]
        self.cache = None  # a PrefixCache (windtunnel.infer.prefix) when the traffic carries block hashes

    # ---- queue ----------------------------------------------------------------------------------
    def enqueue(self, rid: int, now: float) -> None:
        """A request arrives (a new one, or a hand-over with its KV)."""
        sim = self.sim
        sim.where[rid] = self.index
        sim.state[rid] = WAITING
        self.waiting.append(rid)
        left = sim.pf_left[rid]
        self.waiting_tokens += left + sim.pf_done[rid]
        if self.role == "prefill":
            self.outstanding += left
        else:
            self.outstanding += left + sim.output[rid] - sim.gen[rid] - (1 if left else 0)
        if not self.busy:
            self.start(now)
        elif self.chunks is None and self.k > 1:
            self._truncate(now)

    def _drop(self, rid: int, context: int) -> None:
        """Reject a waiting request whose context can never fit in this instance's KV cache."""
        sim = self.sim
        self.waiting_tokens -= context
        left = sim.pf_left[rid]
        if self.role == "prefill":
            self.outstanding -= left
        else:
            self.outstanding -= left + sim.output[rid] - sim.gen[rid] - (1 if left else 0)
        sim.reject(rid, self.sim_now)

    def has_work(self) -> bool:
        return bool(self.batch or self.prefilling or self.waiting)

    # ---- one step -------------------------------------------------------------------------------
    def _admit_decodes(self) -> None:
        """Requests that arrive with their KV (hand-overs) join the running batch directly."""
        sim = self.sim
        waiting = self.waiting
        while waiting and sim.pf_left[waiting[0]] == 0:
            rid = waiting[0]
            need = sim.pf_done[rid] + self.block
            extra = sim.output[rid] - sim.gen[rid] if self.reserve else 0
            growth = 0 if self.reserve else self.batch + 1
            if (self.batch + len(self.prefilling) >= self.max_batch
                    or self.kv + self.future + need + extra + growth > self.cap):
                if self.batch == 0 and not self.prefilling and need + extra + 1 > self.cap:
                    waiting.popleft()
                    self._drop(rid, need - self.block)
                    continue
                return
            waiting.popleft()
            self.waiting_tokens -= need - self.block
            sim.kvres[rid] = need
            self.kv += need
            self.future += extra
            self._join_decode(rid)

    def _join_decode(self, rid: int) -> None:
        sim = self.sim
        sim.state[rid] = DECODING
        sim.s0[rid] = self.step
        context = sim.pf_done[rid]
        sim.c0[rid] = context
        self.ctx += context
        self.batch += 1
        heapq.heappush(self.heap, (self.step + sim.output[rid] - sim.gen[rid], rid, sim.ver[rid]))
        self.order.append(rid)

    def _preempt_last(self) -> None:
        """Preempt the most recently admitted running sequence (recompute later)."""
        sim = self.sim
        while self.order:
            rid = self.order.pop()
            if sim.state[rid] == DECODING and sim.where[rid] == self.index:
                break
        else:  # pragma: no cover - only called with a non-empty batch
            return
        done = self.step - sim.s0[rid]
        sim.gen[rid] += done
        self.kv -= sim.kvres[rid] + done
        self.ctx -= sim.c0[rid] + done
        self.batch -= 1
        sim.ver[rid] += 1
        sim.preemptions += 1
        sim.preempted[rid] += 1
        recompute = sim.prompt[rid] + sim.gen[rid]
        sim.pf_left[rid] = recompute
        sim.pf_done[rid] = 0
        sim.kvres[rid] = 0
        sim.state[rid] = WAITING
        self.waiting.appendleft(rid)
        self.waiting_tokens += recompute
        self.outstanding += recompute

    def start(self, now: float) -> None:
        """Form the next batch at ``now`` and schedule its end (or go idle)."""
        sim = self.sim
        self.sim_now = now
        if self.waiting and sim.pf_left[self.waiting[0]] == 0:
            self._admit_decodes()
        cap = self.cap
        if not self.reserve:
            while self.batch and self.kv + self.batch > cap:
                self._preempt_last()
        pf_left, pf_done, output, gen = sim.pf_left, sim.pf_done, sim.output, sim.gen
        chunks: list[tuple[int, int]] = []
        batch = self.batch
        waiting = self.waiting
        reserve = self.reserve
        if self.chunked:
            budget = self.max_tokens - batch
            if budget > 0:
                for rid in self.prefilling:
                    c = pf_left[rid]
                    if c > budget:
                        c = budget
                    chunks.append((rid, c))
                    budget -= c
                    if budget <= 0:
                        break
        else:
            budget = self.max_tokens if waiting and pf_left[waiting[0]] > 0 else 0
        # admission of new prefills (FCFS): room in the batch, the token budget and the KV cache
        whole = self.whole or not self.chunked
        while budget > 0 and waiting and batch + len(self.prefilling) < self.max_batch:
            rid = waiting[0]
            left = pf_left[rid]
            if left == 0 or (whole and left > budget and (chunks or (self.whole and batch))):
                break
            need = left + pf_done[rid] + self.block
            extra = output[rid] - gen[rid] - 1 if reserve else 0
            if self.kv + self.future + need + extra + (0 if reserve else batch) > cap:
                if batch == 0 and not self.prefilling and not chunks and need + extra > cap:
                    waiting.popleft()
                    self._drop(rid, need - self.block)
                    continue
                break
            waiting.popleft()
            self.waiting_tokens -= need - self.block
            sim.kvres[rid] = need
            self.kv += need
            self.future += extra
            sim.state[rid] = PREFILLING
            self.prefilling.append(rid)
            c = left if (left < budget or whole) else budget
            chunks.append((rid, c))
            budget -= c
        decode_in = batch if (self.chunked or not chunks) else 0
        if self.cache is not None:
            self.cache.bound(cap - self.kv - self.future)
        cost = self.cost
        if chunks:
            tokens = decode_in
            n_out = decode_in
            attention = longest = biggest = 0.0
            for rid, c in chunks:
                tokens += c
                if c == pf_left[rid]:
                    n_out += 1
                seconds = cost.prefill_attention(c, pf_done[rid])
                attention += seconds
                if seconds > longest:
                    longest = seconds
                if c > biggest:
                    biggest = c
            busiest = 0
            dp = self.dp
            if dp > 1:
                # a sequence's chunk runs on one attention group: the busiest group has at least that chunk
                attention = max(attention / dp, longest)
                busiest = int(biggest) + -(-decode_in // dp)
            dt = cost.time(tokens, n_out, self.ctx if decode_in else 0, attention, decode_in, busiest)
            self.chunks = chunks
            self.decode_in = decode_in
            self.k = 1
        elif batch:
            heap = self.heap
            state, where, ver = sim.state, sim.where, sim.ver
            while heap:
                _, rid, v = heap[0]
                if v == ver[rid] and state[rid] == DECODING and where[rid] == self.index:
                    break
                heapq.heappop(heap)
            k = heap[0][0] - self.step
            if not reserve:
                room = (cap - self.kv) // batch
                if room < k:
                    k = room
            if k < 1:
                k = 1
            alpha, beta = cost.decode_coefficients(batch, self.ctx)
            self.alpha, self.beta = alpha, beta
            dt = k * alpha + beta * k * (k - 1) * 0.5
            self.chunks = None
            self.decode_in = batch
            self.k = k
        else:
            self.busy = False
            return
        self.busy = True
        self.t0 = now
        self.version += 1
        sim.push(now + dt, EV_STEP, self.index, self.version)

    def _truncate(self, now: float) -> None:
        """An arrival during a decode stretch: stop the stretch at the first iteration boundary >= now."""
        tau = now - self.t0
        alpha, beta, k = self.alpha, self.beta, self.k
        if beta > 0:
            b = alpha - 0.5 * beta
            n = math.ceil((-b + math.sqrt(b * b + 2.0 * beta * tau)) / beta - 1e-9)
        else:
            n = math.ceil(tau / alpha - 1e-9) if alpha > 0 else 1
        n = max(1, n)
        while n < k and n * alpha + beta * n * (n - 1) * 0.5 < tau:
            n += 1
        while n > 1 and (n - 1) * alpha + beta * (n - 1) * (n - 2) * 0.5 >= tau:
            n -= 1
        if n < k:
            self.k = n
            self.version += 1
            self.sim.push(self.t0 + n * alpha + beta * n * (n - 1) * 0.5, EV_STEP, self.index, self.version)

    def finish_step(self, now: float) -> None:
        """Apply the step that ends at ``now``, then start the next one."""
        sim = self.sim
        self.iterations += self.k if self.chunks is None else 1
        self.busy_time += now - self.t0
        k = self.k if self.decode_in else 0
        if k:
            batch = self.batch
            self.step += k
            self.ctx += batch * k
            self.kv += batch * k
            self.outstanding -= batch * k
            if self.reserve:
                self.future -= batch * k
        if self.kv > self.kv_max:
            self.kv_max = self.kv
        chunks = self.chunks
        if chunks:
            pf_left, pf_done, gen = sim.pf_left, sim.pf_done, sim.gen
            finished_prefill = False
            for rid, c in chunks:
                pf_left[rid] -= c
                pf_done[rid] += c
                self.outstanding -= c
                if pf_left[rid] == 0:
                    finished_prefill = True
                    gen[rid] += 1
                    if sim.first[rid] < 0:
                        sim.first[rid] = now
                    elif self.role != "prefill":
                        self.outstanding -= 1
                    if gen[rid] >= sim.output[rid]:
                        self.kv -= sim.kvres[rid]
                        sim.state[rid] = DONE
                        sim.complete(rid, now)
                    elif self.role == "prefill":
                        self.kv -= sim.kvres[rid]
                        sim.state[rid] = MOVING
                        sim.hand_over(rid, now, self)
                    else:
                        self._join_decode(rid)
                    if self.cache is not None:
                        self.cache.insert(sim.hashes[rid], sim.prompt[rid], self.cap - self.kv - self.future)
            if finished_prefill:
                self.prefilling = [r for r in self.prefilling if sim.state[r] == PREFILLING and sim.where[r] == self.index]
        if k:
            heap = self.heap
            step = self.step
            state, where, ver, s0, c0, kvres = sim.state, sim.where, sim.ver, sim.s0, sim.c0, sim.kvres
            index = self.index
            while heap and heap[0][0] <= step:
                _, rid, v = heapq.heappop(heap)
                if v != ver[rid] or state[rid] != DECODING or where[rid] != index:
                    continue
                done = step - s0[rid]
                sim.gen[rid] += done
                self.kv -= kvres[rid] + done
                self.ctx -= c0[rid] + done
                self.batch -= 1
                state[rid] = DONE
                sim.complete(rid, now)
        self.samples_t.append(now)
        self.samples_kv.append(self.kv)
        self.samples_q.append(len(self.waiting))
        self.busy = False
        self.chunks = None
        self.k = 0
        if self.batch or self.prefilling or self.waiting:
            self.start(now)
        elif self.draining:
            sim.controller.drained(sim, self, now)

    def assign(self, plan: InstancePlan, cost: IterationModel) -> None:
        """Take another role's plan (same shape): limits, KV capacity and iteration model (an idle instance)."""
        self.plan = plan
        self.role = plan.role
        self.cost = cost
        self.cap = plan.kv_capacity_tokens
        self.max_batch = plan.max_batch
        self.max_tokens = plan.max_tokens
        self.chunked = plan.batching != "separate"
        self.whole = plan.batching == "whole"
        self.reserve = plan.admission == "reserve" and plan.role != "prefill"
        self.samples_t.append(self.sim_now)
        self.samples_kv.append(0)
        self.samples_q.append(0)
