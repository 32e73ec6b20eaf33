"""Role switching between instances of different shapes: prefill and decode pools share a device budget.

When the prefill and decode instances differ in shape (e.g. prefill TP4, decode TP8, or DeepSeek's EP32
prefill and EP128 decode), moving capacity between the roles moves devices: the controller drains as many
instances of the donor role as it takes to free one instance of the other role's devices, keeps them out of
service for the switching cost (re-partitioning the weights for the new parallel plan, new graphs and KV
cache), then starts one instance of the other role on them. The devices in use never exceed the budget (the
starting deployment's devices).

The decision rule is the role switcher's (windtunnel.infer.dynamic): from the queued prefill tokens, running
and queued decode sequences and the last interval's arrivals it predicts the prefill utilisation and the decode
TPOT; it moves capacity to prefill when the prefill utilisation exceeds 0.9 and the decode pool without the
donors keeps TPOT under 80% of the objective, and to decode when TPOT exceeds 90% of the objective and the
prefill pool without the donors stays under 70% utilisation. One switch in flight at a time. Times in seconds.
"""

from __future__ import annotations

import math

from windtunnel.infer.metrics import SLO
from windtunnel.infer.sim import EV_CONTROL, Instance, Simulator


class ShapeSwitcher:
    """The controller the simulator calls every ``interval`` seconds (see the module docstring)."""

    def __init__(self, slo: SLO, *, interval_s: float, switch_cost_s: float, budget: int, start: dict[str, int]) -> None:
        self.slo = slo
        self.interval = interval_s
        self.switch_cost = switch_cost_s
        self.budget = budget
        self.start = start
        self.donors: list[Instance] = []
        self.target: Instance | None = None
        self.last_admitted = 0
        self.last_prompt_sum = 0
        self.switches: list[dict] = []

    def install(self, sim: Simulator) -> None:
        for pool in (sim.front.pool, sim.back.pool):
            keep = self.start[pool[0].role]
            for inst in pool[keep:]:
                inst.accepting = False
        sim.push(self.interval, EV_CONTROL, 0, 0)

    # ---- observation ----------------------------------------------------------------------------
    @staticmethod
    def _active(pool: list[Instance]) -> list[Instance]:
        return [i for i in pool if i.accepting]

    def _in_use(self, sim: Simulator) -> int:
        busy = [i for i in sim.instances if i.accepting or i.draining or i is self.target]
        return sum(i.plan.devices for i in busy)

    @staticmethod
    def _prefill_s_per_token(inst: Instance, mean_prompt: float) -> float:
        plan, cost = inst.plan, inst.cost
        tokens = max(1, min(plan.max_tokens, 8192 * plan.dp))
        length = max(1, int(mean_prompt))
        return cost.base(tokens) / tokens + cost.prefill_attention(length, 0) / length / plan.dp

    # ---- control --------------------------------------------------------------------------------
    def tick(self, sim: Simulator, now: float) -> None:
        arrivals = sim.admitted - self.last_admitted
        prompt_sum = sim.prompt_sum - self.last_prompt_sum
        self.last_admitted, self.last_prompt_sum = sim.admitted, sim.prompt_sum
        if self.target is None and arrivals > 0:
            self._decide(sim, now, arrivals / self.interval, prompt_sum / arrivals)
        if sim.done < len(sim.prompt):
            sim.push(now + self.interval, EV_CONTROL, 0, 0)

    def _decide(self, sim: Simulator, now: float, rate: float, mean_prompt: float) -> None:
        front, back = sim.front.pool, sim.back.pool
        prefill, decode = self._active(front), self._active(back)
        per_token = self._prefill_s_per_token(front[0], mean_prompt)
        backlog = sum(i.outstanding for i in prefill)
        demand = (backlog + rate * mean_prompt * self.interval) * per_token / self.interval
        sequences = sum(i.batch + len(i.waiting) for i in decode)
        mean_output = sim.output_sum / sim.done if sim.done else 256.0
        context = mean_prompt + mean_output / 2.0
        ref = back[0]

        def util(n: int) -> float:
            return demand / n if n > 0 else math.inf

        def tpot(n: int) -> float:
            if n <= 0:
                return math.inf
            batch = max(1, min(ref.max_batch, int(round((sequences + rate * mean_output * 0.05) / n))))
            return ref.cost.decode_coefficients(batch, batch * context)[0]

        tpot_slo = self.slo.tpot_s or math.inf
        free = self.budget - self._in_use(sim)
        d_p, d_d = front[0].plan.devices, back[0].plan.devices
        parked_p = [i for i in front if not i.accepting and not i.draining]
        parked_d = [i for i in back if not i.accepting and not i.draining]
        give_d = max(0, math.ceil((d_p - free) / d_d))
        give_p = max(0, math.ceil((d_d - free) / d_p))
        if (parked_p and util(len(prefill)) > 0.9 and len(decode) - give_d >= 1
                and tpot(len(decode) - give_d) < 0.8 * tpot_slo):
            donors = sorted(decode, key=lambda i: i.batch + len(i.waiting))[:give_d]
            self._start(sim, now, donors, parked_p[0])
        elif (parked_d and tpot(len(decode)) > 0.9 * tpot_slo and len(prefill) - give_p >= 1
              and util(len(prefill) - give_p) < 0.7):
            donors = sorted(prefill, key=lambda i: i.outstanding)[:give_p]
            self._start(sim, now, donors, parked_d[0])

    def _start(self, sim: Simulator, now: float, donors: list[Instance], target: Instance) -> None:
        self.target, self.donors = target, list(donors)
        sim.switches.append({"instances": [d.index for d in donors], "from": donors[0].role if donors else "free",
                             "to": target.role, "into": target.index, "decided_s": now})
        if not donors:
            self._ready_after(sim, now)
            return
        for inst in donors:
            inst.accepting = False
            inst.draining = True
        for inst in list(donors):
            if not inst.has_work() and not inst.busy:
                self.drained(sim, inst, now)

    def drained(self, sim: Simulator, inst: Instance, now: float) -> None:
        """A donor holds no more work: it parks; when the last one has, the new instance starts loading."""
        inst.draining = False
        if inst in self.donors:
            self.donors.remove(inst)
        if not self.donors and self.target is not None:
            self._ready_after(sim, now)

    def _ready_after(self, sim: Simulator, now: float) -> None:
        sim.switches[-1]["drained_s"] = now
        sim.push(now + self.switch_cost, EV_CONTROL, 1, self.target.index)

    def finish_switch(self, sim: Simulator, inst: Instance, now: float) -> None:
        inst.accepting = True
        sim.switches[-1]["ready_s"] = now
        self.target = None
