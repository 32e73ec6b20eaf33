"""Autoscaling: start and stop replicas of each pool as the load moves, paying a start-up cost, and compare
with the best static replica count chosen in hindsight.

Controller (every ``interval`` seconds, per pool - the mixed or prefill pool and the decode pool - one change in
flight per pool). From what a real controller observes - queued requests and prompt tokens, running sequences,
KV occupancy, the arrivals of the last interval - and the cost model's iteration times it predicts, for the pool
with ``n`` active replicas (one change of a pool in flight at a time),

* the prefill utilisation = arrival rate x mean prompt x prefill seconds per token / n, and the queue wait =
  queued prompt tokens x prefill seconds per token / n (mixed and prefill pools);
* the decode TPOT = the decode iteration time at the per-replica batch (running + queued sequences) / n and the
  mean context, stretched by the prefill utilisation in a mixed pool (mixed and decode pools).

It starts as many parked replicas as it takes to bring the prefill utilisation under 0.8, the queue wait under
half the TTFT objective, the TPOT under 85% of its objective and KV occupancy under 90% (counting them as if they
served already); it stops one (the least loaded: it drains, then parks) when, with one
replica fewer, the utilisation would stay under 0.6, the queue wait under 25% of the TTFT objective, the TPOT
under 70% of its objective and KV occupancy under 75%, on two looks in a row. A started replica holds its devices from the decision on and
serves after the start-up cost (default 60 s: weights from host or remote storage, graphs, KV-cache allocation).
With every replica of a pool serving (``batch_limits``), it also caps the running batch at the largest one whose
decode step keeps 90% of the TPOT objective, and lifts the cap while replicas are parked.

Devices are counted while a replica is starting or active. The static reference runs every replica count from 1
to the deployment's (each pool scaled in proportion); the best static one is the fewest devices whose SLO
attainment reaches ``target`` (else the highest attainment). Times in seconds.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from windtunnel.infer.deployment import parse_deployment
from windtunnel.infer.dynamic import replay
from windtunnel.infer.metrics import SLO, parse_slo
from windtunnel.infer.sim import EV_CONTROL, Instance, Simulator
from windtunnel.infer.traffic import Workload, parse_traffic
from windtunnel.infer.units import parse_seconds
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.model import ModelSpec, load_model


class Autoscaler:
    """The controller the simulator calls every ``interval`` seconds (see the module docstring)."""

    def __init__(self, slo: SLO, *, interval_s: float, startup_s: float, start: dict[str, int],
                 batch_limits: bool = True) -> None:
        self.slo = slo
        self.interval = interval_s
        self.startup = startup_s
        self.start = start  # role -> replicas active at time 0
        self.pending: dict[str, int] = {}  # role -> changes in flight
        self.calm: dict[str, int] = {}
        self.last_admitted = 0
        self.last_prompt_sum = 0
        self.active_since: dict[int, float] = {}
        self.device_seconds = 0.0
        self.events: list[dict] = []
        self.peak = 0
        self.batch_limits = batch_limits
        self.batch_limit: dict[str, int] = {}  # role -> the running-batch cap now in force

    # ---- set-up ---------------------------------------------------------------------------------
    def install(self, sim: Simulator) -> None:
        for pool in self._pools(sim):
            role = pool[0].role
            keep = max(1, min(len(pool), self.start.get(role, len(pool))))
            for inst in pool[keep:]:
                inst.accepting = False
            for inst in pool[:keep]:
                self.active_since[inst.index] = 0.0
        self.peak = sum(sim.instances[i].plan.devices for i in self.active_since)
        sim.push(self.interval, EV_CONTROL, 0, 0)

    @staticmethod
    def _pools(sim: Simulator) -> list[list[Instance]]:
        return [p.pool for p in (sim.front, sim.back) if p is not None]

    # ---- predictions ----------------------------------------------------------------------------
    @staticmethod
    def _prefill_s_per_token(inst: Instance, mean_prompt: float) -> float:
        plan, cost = inst.plan, inst.cost
        tokens = max(1, min(plan.max_tokens, 8192 * plan.dp))
        length = max(1, int(mean_prompt))
        return cost.base(tokens) / tokens + cost.prefill_attention(length, 0) / length / plan.dp

    @staticmethod
    def _tpot(inst: Instance, batch: float, context: float) -> float:
        b = max(1, min(inst.max_batch, int(round(batch))))
        return inst.cost.decode_coefficients(b, b * context)[0]

    def _pressure(self, sim: Simulator, pool: list[Instance], n: int, rate: float, mean_prompt: float) -> tuple:
        """(prefill utilisation, queue wait / TTFT objective, TPOT / TPOT objective, KV occupancy) of the pool
        with ``n`` active replicas."""
        active = [i for i in pool if i.accepting]
        ref = active[0] if active else pool[0]
        ttft_slo = self.slo.ttft_s or float("inf")
        tpot_slo = self.slo.tpot_s or float("inf")
        util = wait = tpot = 0.0
        if ref.role in ("mixed", "prefill"):
            per_token = self._prefill_s_per_token(ref, mean_prompt)
            util = rate * mean_prompt * per_token / n
            wait = sum(i.waiting_tokens for i in active) * per_token / n / ttft_slo
        if ref.role in ("mixed", "decode"):
            sequences = sum(i.batch + len(i.waiting) for i in active)
            mean_output = sim.output_sum / sim.done if sim.done else 256.0
            tpot = self._tpot(ref, sequences / n, mean_prompt + mean_output / 2.0)
            if ref.role == "mixed":  # prefill iterations stretch the decode cadence
                tpot /= max(0.05, 1.0 - min(util, 0.95))
            tpot /= tpot_slo
        kv = sum(i.kv for i in active) / max(1.0, n * ref.cap)
        return util, wait, tpot, kv

    # ---- control --------------------------------------------------------------------------------
    def tick(self, sim: Simulator, now: float) -> None:
        arrivals = sim.admitted - self.last_admitted
        prompt_sum = sim.prompt_sum - self.last_prompt_sum
        self.last_admitted, self.last_prompt_sum = sim.admitted, sim.prompt_sum
        rate = arrivals / self.interval
        mean_prompt = prompt_sum / arrivals if arrivals else (sim.prompt_sum / max(1, sim.admitted))
        for pool in self._pools(sim):
            role = pool[0].role
            if self.pending.get(role):
                continue
            active = [i for i in pool if i.accepting]
            parked = [i for i in pool if not i.accepting and not i.draining and i.index not in self.active_since]
            n = len(active)
            add = 0
            while add < len(parked) and self._hot(*self._pressure(sim, pool, n + add, rate, mean_prompt)):
                add += 1
            if add:
                for inst in parked[:add]:
                    self._scale_out(sim, now, inst)
                self.calm[role] = 0
                continue
            if n > 1:
                u1, w1, t1, k1 = self._pressure(sim, pool, n - 1, rate, mean_prompt)
                calm = u1 < 0.55 and w1 < 0.2 and t1 < 0.65 and k1 < 0.7
                self.calm[role] = self.calm.get(role, 0) + 1 if calm else 0
                if self.calm[role] >= 3:
                    self._scale_in(sim, now, min(active, key=lambda i: i.batch + len(i.waiting)))
                    self.calm[role] = 0
            if self.batch_limits and role in ("mixed", "decode") and active:
                self._limit_batch(now, active, parked, mean_prompt, sim)
        if sim.done < len(sim.prompt):
            sim.push(now + self.interval, EV_CONTROL, 0, 0)

    def _limit_batch(self, now: float, active: list[Instance], parked: list[Instance], mean_prompt: float,
                     sim: Simulator) -> None:
        """With every replica of the pool serving, cap the running batch at the largest one whose decode step
        keeps 90% of the TPOT objective (more sequences wait instead of slowing every stream); lift the cap
        while replicas are parked."""
        ref = active[0]
        limit = ref.plan.max_batch
        tpot_slo = self.slo.tpot_s
        if not parked and tpot_slo:
            mean_output = sim.output_sum / sim.done if sim.done else 256.0
            context = mean_prompt + mean_output / 2.0
            low, high = 1, ref.plan.max_batch
            while low < high:
                mid = (low + high + 1) // 2
                if self._tpot(ref, mid, context) <= 0.9 * tpot_slo:
                    low = mid
                else:
                    high = mid - 1
            limit = max(1, low)
        if limit != self.batch_limit.get(ref.role, ref.plan.max_batch):
            self.batch_limit[ref.role] = limit
            self.events.append({"instance": -1, "role": ref.role, "action": "batch_limit", "decided_s": now,
                                "max_batch": limit})
        for inst in active + parked:
            inst.max_batch = limit

    @staticmethod
    def _hot(util: float, wait: float, tpot: float, kv: float) -> bool:
        return util > 0.7 or wait > 0.4 or tpot > 0.8 or kv > 0.85

    def _scale_out(self, sim: Simulator, now: float, inst: Instance) -> None:
        self.pending[inst.role] = self.pending.get(inst.role, 0) + 1
        self.active_since[inst.index] = now
        self.peak = max(self.peak, sum(sim.instances[i].plan.devices for i in self.active_since))
        self.events.append({"instance": inst.index, "role": inst.role, "action": "start", "decided_s": now,
                            "ready_s": now + self.startup})
        sim.push(now + self.startup, EV_CONTROL, 1, inst.index)

    def finish_switch(self, sim: Simulator, inst: Instance, now: float) -> None:
        """A started replica has loaded: it takes requests."""
        inst.accepting = True
        self.pending[inst.role] -= 1

    def _scale_in(self, sim: Simulator, now: float, inst: Instance) -> None:
        inst.accepting = False
        inst.draining = True
        self.pending[inst.role] = 1
        self.events.append({"instance": inst.index, "role": inst.role, "action": "stop", "decided_s": now})
        if not inst.has_work() and not inst.busy:
            self.drained(sim, inst, now)

    def drained(self, sim: Simulator, inst: Instance, now: float) -> None:
        """A stopping replica holds no more work: it parks and frees its devices."""
        inst.draining = False
        self.device_seconds += (now - self.active_since.pop(inst.index)) * inst.plan.devices
        for event in reversed(self.events):
            if event["instance"] == inst.index and event["action"] == "stop":
                event["parked_s"] = now
                break
        self.pending[inst.role] = 0

    def finish(self, sim: Simulator, end: float) -> None:
        """Count the devices of replicas still active at ``end``."""
        for index, since in list(self.active_since.items()):
            inst = sim.instances[index]
            self.device_seconds += (end - since) * inst.plan.devices
        self.active_since.clear()


def _scaled(deployment, factor: float):
    groups = tuple(replace(g, replicas=max(1, round(g.replicas * factor))) for g in deployment.groups)
    return replace(deployment, groups=groups)


def _run(model: ModelSpec, hardware: str, deployment, workload: Workload, slo: SLO, controller=None) -> tuple:
    sim, out, result, devices = replay(model, hardware, deployment, workload, slo, controller)
    end = float(np.max(out.finish)) if out.finish.size else 0.0
    if controller is not None:
        controller.finish(sim, end)
        used = controller.device_seconds
    else:
        used = devices * end
    return result, used, end, devices


def _row(result, used: float, end: float, devices: int, label: str) -> dict:
    return {"deployment": label, "devices": devices, "mean_devices": used / end if end > 0 else 0.0,
            "device_hours": used / 3600.0, "goodput_per_s": result.goodput_requests_per_s,
            "slo_attainment": result.slo_attainment, "ttft_p90_s": result.ttft_s["p90"],
            "tpot_p90_s": result.tpot_s["p90"], "makespan_s": end}


MAX_AUTOSCALE_REPLICAS = 512  # one simulation per static count


def compare_autoscale(model: str | ModelSpec, hardware: str, deployment: str, traffic: str | Workload, *,
                      slo: str | SLO | None = "ttft=2s,tpot=100ms", seed: int = 0, startup: str | float = "60s",
                      interval: str | float = "15s", start_fraction: float = 0.5, target: float = 0.99,
                      batch_limits: bool = True) -> dict:
    """The autoscaler on ``deployment`` (its replica counts are the maximum; it starts with ``start_fraction``
    of them) against every static replica count from one to the deployment's, on ``traffic``."""
    started = time.perf_counter()
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    dep = parse_deployment(deployment)
    if not 0.0 < start_fraction <= 1.0:
        raise WindtunnelError("Field 'start_fraction' must be in (0, 1].", field="start_fraction")
    if not 0.0 < target <= 1.0:
        raise WindtunnelError(f"Field 'target' is {target!r}; give an SLO attainment in (0, 1], e.g. 0.99.",
                              field="target")
    if max(g.replicas for g in dep.groups) > MAX_AUTOSCALE_REPLICAS:
        raise WindtunnelError(f"Autoscaling compares every static replica count up to the deployment's; give at most "
                              f"{MAX_AUTOSCALE_REPLICAS} replicas per pool (field 'replicas').", field="replicas")
    slo_spec = parse_slo(slo)
    workload = traffic if isinstance(traffic, Workload) else parse_traffic(traffic, seed=seed)
    largest = max(g.replicas for g in dep.groups)
    static = []
    for count in range(1, largest + 1):
        scaled = _scaled(dep, count / largest)
        static.append(_row(*_run(spec, hardware, scaled, workload, slo_spec), scaled.text()))
    meeting = [r for r in static if r["slo_attainment"] >= target]
    best = min(meeting, key=lambda r: r["devices"]) if meeting else max(static, key=lambda r: r["slo_attainment"])
    controller = Autoscaler(slo_spec, interval_s=parse_seconds(interval, "interval"),
                            startup_s=parse_seconds(startup, "startup"),
                            start={g.role: max(1, round(g.replicas * start_fraction)) for g in dep.groups},
                            batch_limits=batch_limits)
    if controller.interval <= 0:
        raise WindtunnelError("Field 'interval' must be a positive duration.", field="interval")
    auto = _row(*_run(spec, hardware, dep, workload, slo_spec, controller=controller), dep.text() + " (autoscaled)")
    auto["events"] = controller.events
    auto["peak_devices"] = controller.peak
    saving = 1.0 - auto["device_hours"] / best["device_hours"] if best["device_hours"] > 0 else None
    # The fewest static devices that reach the autoscaler's own attainment (the like-for-like comparison).
    matching = [r for r in static if r["slo_attainment"] >= auto["slo_attainment"]]
    same = min(matching, key=lambda r: r["devices"]) if matching else None
    saving_same = (1.0 - auto["device_hours"] / same["device_hours"]) if same and same["device_hours"] > 0 else None
    return {"model": spec.id, "hardware": hardware, "deployment": dep.text(), "target": target,
            "slo": {"ttft_s": slo_spec.ttft_s, "tpot_s": slo_spec.tpot_s}, "traffic": workload.summary(),
            "startup_s": controller.startup, "interval_s": controller.interval, "static": static,
            "best_static": best, "autoscaled": auto, "device_hours_saved": saving,
            "static_at_same_attainment": same, "device_hours_saved_at_same_attainment": saving_same,
            "attainment_change": auto["slo_attainment"] - best["slo_attainment"],
            "elapsed_s": time.perf_counter() - started}


def autoscale_table(document: dict, console) -> None:
    """Static replica counts, the best one, the autoscaler and its starts and stops."""
    from rich.table import Table

    table = Table(title=f"static replica counts vs autoscaling ({document['model']} on {document['hardware']})")
    for column in ("deployment", "devices", "mean devices", "device-hours", "goodput req/s", "SLO met"):
        table.add_column(column, justify="right")
    for row in document["static"] + [document["autoscaled"]]:
        table.add_row(row["deployment"], str(row.get("peak_devices", row["devices"])), f"{row['mean_devices']:.1f}",
                      f"{row['device_hours']:.2f}", f"{row['goodput_per_s']:.3f}", f"{row['slo_attainment']:.1%}")
    console.print(table)
    best, saved = document["best_static"], document["device_hours_saved"]
    console.print(f"best static (fewest devices with SLO attainment >= {document['target']:.0%}): {best['deployment']}; "
                  f"autoscaled saves {'-' if saved is None else f'{saved:+.1%}'} of its device-hours, attainment "
                  f"{document['attainment_change']:+.2%} points (start-up {document['startup_s']:g} s)")
    for event in document["autoscaled"]["events"]:
        end = event.get("ready_s", event.get("parked_s"))
        console.print(f"  {event['action']} instance {event['instance']} ({event['role']}): decided {event['decided_s']:.0f} s"
                      + ("" if end is None else f", {'ready' if event['action'] == 'start' else 'parked'} {end:.0f} s"))
