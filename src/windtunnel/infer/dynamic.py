"""Dynamic, performance-aware role switching: move instances between the prefill and decode pools as the
traffic mix shifts, and compare with the best static split.

Policy (evaluated every ``interval`` seconds, one switch in flight at a time). From what a real controller
can observe - queued prefill tokens, running and queued decode sequences, the arrivals and completions of
the last interval - and the cost model's iteration times, it predicts

* prefill utilisation = (queued prefill tokens + arrival rate x mean prompt x interval) x prefill seconds
  per token / (prefill instances x interval);
* decode TPOT = the decode iteration time at the per-instance batch the decode pool will hold
  (running + queued sequences / decode instances) and the mean context.

If prefill utilisation exceeds 0.9 and the decode pool, one instance smaller, still keeps TPOT under 80%
of the SLO, a decode instance moves to prefill; if TPOT exceeds 90% of the SLO and the prefill pool, one
instance smaller, stays under 70% utilisation, a prefill instance moves to decode. The least loaded
instance of the donor pool stops receiving requests, finishes what it holds, is out of service for the
stated switching cost (default 30 s: restarting the engine for the other role's batch limits and
graphs, re-partitioning its KV cache; weights stay loaded), then joins the other pool.

With one instance shape in both pools a switch keeps the device count. With different shapes (parallel plan
or chip) the pools share the starting deployment's devices and a switch drains as many donor instances as
it takes to free one instance of the other role (windtunnel.infer.reshape). The static reference is the
best prefill:decode split of the same devices for the whole traffic.
"""

from __future__ import annotations

import time

from windtunnel.infer.deployment import Deployment, InstanceSpec, parse_deployment, resolve_deployment
from windtunnel.infer.metrics import SLO, parse_slo, summarise
from windtunnel.infer.reshape import ShapeSwitcher
from windtunnel.infer.sim import EV_CONTROL, Instance, Simulator
from windtunnel.infer.traffic import Workload, parse_traffic
from windtunnel.infer.units import parse_seconds
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.model import ModelSpec, load_model

SHAPE_KEYS = ("tp", "dp", "ep", "pp", "chip", "precision", "kv")


class RoleSwitcher:
    """The controller the simulator calls every ``interval`` seconds (see the module docstring)."""

    def __init__(self, slo: SLO, *, interval_s: float, switch_cost_s: float) -> None:
        self.slo = slo
        self.interval = interval_s
        self.switch_cost = switch_cost_s
        self.pending: Instance | None = None
        self.target_role = ""
        self.last_admitted = 0
        self.last_prompt_sum = 0
        self.plans: dict[str, object] = {}
        self.costs: dict[str, object] = {}

    def install(self, sim: Simulator) -> None:
        for inst in sim.instances:
            self.plans.setdefault(inst.role, inst.plan)
            self.costs.setdefault(inst.role, inst.cost)
        if set(self.plans) != {"prefill", "decode"}:
            raise WindtunnelError("Dynamic role switching needs a disaggregated deployment (prefill and decode pools).",
                                  field="deployment")
        sim.push(self.interval, EV_CONTROL, 0, 0)

    # ---- predictions ------------------------------------------------------------------------------
    def _prefill_seconds_per_token(self, mean_prompt: float) -> float:
        cost, plan = self.costs["prefill"], self.plans["prefill"]
        tokens = max(1, min(plan.max_tokens, 8192 * plan.dp))
        length = max(1, int(mean_prompt))
        return cost.base(tokens) / tokens + cost.prefill_attention(length, 0) / length / plan.dp

    def _tpot(self, batch: float, context: float) -> float:
        cost = self.costs["decode"]
        b = max(1, int(round(batch)))
        alpha, _ = cost.decode_coefficients(b, b * context)
        return alpha

    def tick(self, sim: Simulator, now: float) -> None:
        """Look at the load and maybe start a switch; then schedule the next look."""
        admitted = sim.admitted
        arrivals = admitted - self.last_admitted
        prompt_sum = sim.prompt_sum - self.last_prompt_sum
        self.last_admitted, self.last_prompt_sum = admitted, prompt_sum + self.last_prompt_sum
        if self.pending is None and arrivals > 0:
            self._decide(sim, now, arrivals / self.interval, prompt_sum / arrivals)
        if sim.done < len(sim.prompt):
            sim.push(now + self.interval, EV_CONTROL, 0, 0)

    def _decide(self, sim: Simulator, now: float, rate: float, mean_prompt: float) -> None:
        prefill = [i for i in sim.front.pool if i.accepting]
        decode = [i for i in sim.back.pool if i.accepting]
        backlog = sum(i.outstanding for i in prefill)
        per_token = self._prefill_seconds_per_token(mean_prompt)
        demand = (backlog + rate * mean_prompt * self.interval) * per_token / self.interval

        def util(n: int) -> float:
            return demand / n if n > 0 else float("inf")

        sequences = sum(i.batch + len(i.waiting) for i in decode)
        mean_output = sim.output_sum / sim.done if sim.done else 256.0
        context = mean_prompt + mean_output / 2.0
        incoming = rate * mean_output * self._tpot(max(1.0, sequences / max(1, len(decode))), context)

        def tpot(n: int) -> float:
            return self._tpot((sequences + incoming) / n, context) if n > 0 else float("inf")

        tpot_slo = self.slo.tpot_s or float("inf")
        if util(len(prefill)) > 0.9 and len(decode) > 1 and tpot(len(decode) - 1) < 0.8 * tpot_slo:
            self._start(sim, now, min(decode, key=lambda i: i.outstanding), "prefill")
        elif tpot(len(decode)) > 0.9 * tpot_slo and len(prefill) > 1 and util(len(prefill) - 1) < 0.7:
            self._start(sim, now, min(prefill, key=lambda i: i.outstanding), "decode")

    # ---- mechanics --------------------------------------------------------------------------------
    def _start(self, sim: Simulator, now: float, inst: Instance, role: str) -> None:
        inst.accepting = False
        inst.draining = True
        self.pending, self.target_role = inst, role
        sim.switches.append({"instance": inst.index, "from": inst.role, "to": role, "decided_s": now})
        if not inst.has_work() and not inst.busy:
            self.drained(sim, inst, now)

    def drained(self, sim: Simulator, inst: Instance, now: float) -> None:
        """The switching instance holds no more work: it is out of service for the switching cost."""
        inst.draining = False
        sim.switches[-1]["drained_s"] = now
        sim.push(now + self.switch_cost, EV_CONTROL, 1, inst.index)

    def finish_switch(self, sim: Simulator, inst: Instance, now: float) -> None:
        role = self.target_role
        source, target = (sim.front, sim.back) if role == "decode" else (sim.back, sim.front)
        source.pool.remove(inst)
        target.pool.append(inst)
        target.pool.sort(key=lambda i: i.index)
        inst.assign(self.plans[role], self.costs[role])
        inst.accepting = True
        sim.switches[-1]["ready_s"] = now
        self.pending = None


def _shape(spec: InstanceSpec) -> tuple:
    return tuple(getattr(spec, key) for key in SHAPE_KEYS)


def _sized(deployment: Deployment, prefill: int, decode: int) -> Deployment:
    """``deployment`` with ``prefill`` prefill and ``decode`` decode instances."""
    from dataclasses import replace

    p_spec = next(g for g in deployment.groups if g.role == "prefill")
    d_spec = next(g for g in deployment.groups if g.role == "decode")
    return Deployment(groups=(replace(p_spec, replicas=prefill), replace(d_spec, replicas=decode)),
                      router=deployment.router)


def replay(model: ModelSpec, hardware: str, deployment: Deployment, workload: Workload, slo: SLO, controller=None):
    """Serve ``workload`` on ``deployment`` (with ``controller`` acting on it, if given): (simulator, its raw
    output, the summary, devices the deployment holds at the start)."""
    plans = resolve_deployment(model, hardware, deployment)
    devices = sum(p.total_devices for p in plans)
    sim = Simulator(model, plans, workload, deployment.router, transfer_cluster=load_hardware(hardware, devices),
                    controller=controller)
    out = sim.run()
    result = summarise(out, model=model.id, hardware=hardware, deployment=deployment.text(), traffic={}, slo=slo, seed=0,
                       devices=devices, pools=[], class_names=workload.class_names, assumptions=[])
    return sim, out, result, devices


def _run(model: ModelSpec, hardware: str, deployment: Deployment, workload: Workload, slo: SLO, controller=None):
    return replay(model, hardware, deployment, workload, slo, controller)[2]


def _row(result, prefill: int, total: int) -> dict:
    return {"prefill_instances": prefill, "decode_instances": total - prefill, "devices": result.devices,
            "goodput_per_s": result.goodput_requests_per_s, "goodput_per_s_per_device": result.goodput_per_device,
            "slo_attainment": result.slo_attainment, "ttft_p90_s": result.ttft_s["p90"], "tpot_p90_s": result.tpot_s["p90"],
            "per_class": {k: v["slo_attainment"] for k, v in result.per_class.items()}}


def compare_dynamic(model: str | ModelSpec, hardware: str, deployment: str | Deployment, traffic: str | Workload, *,
                    slo: str | SLO | None = "ttft=2s,tpot=100ms", seed: int = 0, switch_cost: str | float = "30s",
                    interval: str | float = "15s") -> dict:
    """Goodput of the best static prefill:decode split of ``deployment``'s instances and of the dynamic
    role-switching policy starting from ``deployment``'s split, on ``traffic``."""
    start = time.perf_counter()
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    dep = parse_deployment(deployment)
    if not dep.disaggregated or len(dep.groups) != 2:
        raise WindtunnelError("Dynamic role switching needs one prefill and one decode pool, e.g. "
                              "'prefill:tp=8,replicas=2;decode:tp=8,replicas=2' (field 'deployment').", field="deployment")
    p_spec = next(g for g in dep.groups if g.role == "prefill")
    d_spec = next(g for g in dep.groups if g.role == "decode")
    slo_spec = parse_slo(slo)
    workload = traffic if isinstance(traffic, Workload) else parse_traffic(traffic, seed=seed)
    interval_s, switch_s = parse_seconds(interval, "interval"), parse_seconds(switch_cost, "switch_cost")
    if interval_s <= 0:
        raise WindtunnelError("Field 'interval' must be a positive duration.", field="interval")
    total = p_spec.replicas + d_spec.replicas
    if _shape(p_spec) == _shape(d_spec):
        splits = [(n, total - n) for n in range(1, total)]
        controller = RoleSwitcher(slo_spec, interval_s=interval_s, switch_cost_s=switch_s)
        start_dep = dep
    else:  # different shapes share the starting deployment's devices (windtunnel.infer.reshape)
        devices = {p.role: p.devices for p in resolve_deployment(spec, hardware, dep)}
        d_p, d_d = devices["prefill"], devices["decode"]
        budget = p_spec.replicas * d_p + d_spec.replicas * d_d
        splits = [(n, (budget - n * d_p) // d_d) for n in range(1, budget // d_p + 1) if budget - n * d_p >= d_d]
        controller = ShapeSwitcher(slo_spec, interval_s=interval_s, switch_cost_s=switch_s, budget=budget,
                                   start={"prefill": p_spec.replicas, "decode": d_spec.replicas})
        start_dep = _sized(dep, budget // d_p, budget // d_d)
    static = [_row(_run(spec, hardware, _sized(dep, p, d), workload, slo_spec), p, p + d) for p, d in splits]
    best = max(static, key=lambda r: (r["goodput_per_s"], -abs(r["prefill_instances"] - p_spec.replicas)))
    result = _run(spec, hardware, start_dep, workload, slo_spec, controller=controller)
    dynamic = _row(result, p_spec.replicas, total)
    if start_dep is not dep:
        dynamic["devices"] = budget
    dynamic["switches"] = result.switches
    gain = dynamic["goodput_per_s"] / best["goodput_per_s"] - 1.0 if best["goodput_per_s"] > 0 else None
    return {"model": spec.id, "hardware": hardware, "deployment": dep.text(), "instances": total,
            "slo": {"ttft_s": slo_spec.ttft_s, "tpot_s": slo_spec.tpot_s}, "traffic": workload.summary(),
            "switch_cost_s": controller.switch_cost, "interval_s": controller.interval,
            "static": static, "best_static": best, "dynamic": dynamic, "gain_over_best_static": gain,
            "elapsed_s": time.perf_counter() - start}


def dynamic_table(document: dict, console) -> None:
    """Static splits, the best one, the dynamic policy and its switches."""
    from rich.table import Table

    table = Table(title=f"static prefill:decode splits of {document['instances']} instances "
                        f"({document['model']} on {document['hardware']})")
    for column in ("prefill:decode", "goodput req/s", "SLO met", "TTFT p90 ms", "TPOT p90 ms"):
        table.add_column(column, justify="right")

    def ms(value):
        return "-" if value is None else f"{value * 1e3:,.1f}"

    for row in document["static"] + [dict(document["dynamic"], label="dynamic")]:
        label = row.get("label") or f"{row['prefill_instances']}:{row['decode_instances']}"
        table.add_row(label, f"{row['goodput_per_s']:.3f}", f"{row['slo_attainment']:.1%}", ms(row["ttft_p90_s"]),
                      ms(row["tpot_p90_s"]))
    console.print(table)
    best = document["best_static"]
    gain = document["gain_over_best_static"]
    console.print(f"best static {best['prefill_instances']}:{best['decode_instances']}: {best['goodput_per_s']:.3f} req/s; "
                  f"dynamic (starting {document['deployment']}, switching cost {document['switch_cost_s']:g} s): "
                  f"{document['dynamic']['goodput_per_s']:.3f} req/s"
                  + (f" ({gain:+.1%})" if gain is not None else ""))
    for switch in document["dynamic"]["switches"]:
        which = (f"instance {switch['instance']}" if "instance" in switch else
                 f"instances {switch['instances']} into instance {switch['into']}")
        console.print(f"  switch {which} {switch['from']} -> {switch['to']}: decided "
                      f"{switch['decided_s']:.0f} s, drained {switch.get('drained_s', float('nan')):.0f} s, ready "
                      f"{switch.get('ready_s', float('nan')):.0f} s")
