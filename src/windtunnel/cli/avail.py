"""`windtunnel avail ...`: Sim2Availability on the command line (a thin layer over windtunnel.avail and the
failure-aware goodput in windtunnel.api). Registered in cli.py with ``app.add_typer(avail_app, name="avail")``."""

from __future__ import annotations

import functools
import inspect
import sys
import typing
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

if typing.TYPE_CHECKING:
    from windtunnel.avail.scenario import Scenario

avail_app = typer.Typer(no_args_is_help=True, help="Sim2Availability: faults, checkpoints, recovery; availability "
                                                   "and ETTR (Markov model and step simulation).")
console = Console()

# shared options (durations accept 30min, 60s, 1.5h, 54d; a bare number is an error: the unit is never guessed)
DEVICES = typer.Option(..., help="Devices (accelerators) in the job.")
HARDWARE = typer.Option(None, help="Chip or cluster id (or cluster YAML): gives devices per node (server).")
DEVICES_PER_NODE = typer.Option(None, help="Devices per node (server); overrides --hardware.")
FAULTS = typer.Option("catalog:llama3-54day", help="Fault profile: catalog:NAME (see `avail profiles`) or a YAML file.")
POLICY = typer.Option("restart-from-checkpoint", help="KIND[,key=value...]: restart-from-checkpoint, "
                      "in-memory-checkpoint, hot-spare, elastic-shrink; keys detect, restart, spares, repair, ...")
CKPT_EVERY = typer.Option(None, help="Checkpoint interval (running time), e.g. 30min.")
CKPT_COST = typer.Option(None, help="Checkpoint write time, e.g. 60s.")
CKPT_ASYNC = typer.Option(None, "--checkpoint-async/--checkpoint-blocking", help="Asynchronous checkpoint writes.")
CKPT_STALL = typer.Option(None, help="Training stall of an asynchronous checkpoint, e.g. 5s.")
SPARES = typer.Option(None, help="Spare nodes (default 2% of the job's nodes).")
REPAIR = typer.Option(None, help="Mean repair time of a node taken out, e.g. 24h.")
DETECT = typer.Option(None, help="Detection time, e.g. 2min.")
RESTART = typer.Option(None, help="Restart time (isolation, rescheduling, reload), e.g. 10min.")
STEP_TIME = typer.Option("10s", help="Training step time (from Sim2Train, or given).")
HORIZON = typer.Option("54d", help="Wall time simulated per replication.")
RATE_SCALE = typer.Option(1.0, help="Multiply every fault rate (what-if).")
AS_JSON = typer.Option(False, "--json", help="Print JSON.")


def _emit_json(data: dict) -> None:
    from windtunnel.report.jsonout import dumps as strict_json

    sys.stdout.write(strict_json(data, indent=2, sort_keys=True) + "\n")


def _scenario(devices, hardware, devices_per_node, faults, policy, checkpoint_every, checkpoint_cost, checkpoint_async,
              checkpoint_stall, spares, repair, detect, restart, step_time, horizon, rate_scale):
    from windtunnel.avail.policy import parse_policy
    from windtunnel.avail.scenario import make_scenario
    from windtunnel.avail.units import parse_duration

    pol = parse_policy(policy, checkpoint_every_s=checkpoint_every, checkpoint_cost_s=checkpoint_cost,
                       checkpoint_async=checkpoint_async, checkpoint_stall_s=checkpoint_stall, spares=spares,
                       repair_s=repair, detect_s=detect, restart_s=restart)
    return make_scenario(devices, faults, pol, step_time_s=parse_duration(step_time, "step-time", allow_zero=False),
                         horizon_s=parse_duration(horizon, "horizon", allow_zero=False), devices_per_node=devices_per_node,
                         hardware=hardware, rate_scale=rate_scale)


# (name, type, option) of the options every scenario command shares, in the order --help lists them
_SCENARIO_OPTIONS = (
    ("devices", int, DEVICES), ("hardware", str | None, HARDWARE), ("devices_per_node", int | None, DEVICES_PER_NODE),
    ("faults", str, FAULTS), ("policy", str, POLICY), ("checkpoint_every", str | None, CKPT_EVERY),
    ("checkpoint_cost", str | None, CKPT_COST), ("checkpoint_async", bool | None, CKPT_ASYNC),
    ("checkpoint_stall", str | None, CKPT_STALL), ("spares", int | None, SPARES), ("repair", str | None, REPAIR),
    ("detect", str | None, DETECT), ("restart", str | None, RESTART), ("step_time", str, STEP_TIME),
    ("horizon", str, HORIZON), ("rate_scale", float, RATE_SCALE),
)


def scenario_command(name: str):
    """Register an ``avail`` command whose first parameter ``sc`` is the Scenario built from the shared
    options: typer sees those options followed by the command's own, so each command states only its own."""

    def register(fn):
        own = [p for p in inspect.signature(fn).parameters.values() if p.name != "sc"]
        shared = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
                  for n, kind, option in _SCENARIO_OPTIONS]
        hints = typing.get_type_hints(fn, localns={"Scenario": object})  # sc is not an option: no import

        @functools.wraps(fn)
        def command(**kwargs):
            scenario = _scenario(*(kwargs.pop(n) for n, _, _ in _SCENARIO_OPTIONS))
            return fn(scenario, **kwargs)

        command.__signature__ = inspect.Signature(
            [*shared, *(p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints[p.name]) for p in own)])
        command.__annotations__ = {p.name: p.annotation for p in command.__signature__.parameters.values()}
        del command.__wrapped__  # typer must read the signature above, not the wrapped function's
        return avail_app.command(name)(command)

    return register


def _summary_table(title: str, data: dict) -> None:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95% CI", justify="right")
    ci = data.get("ci95", {})
    for key in ("availability", "ettr"):
        lo_hi = ci.get(key)
        table.add_row(key, f"{data[key]:.4%}", f"{lo_hi[0]:.4%} .. {lo_hi[1]:.4%}" if lo_hi else "")
    lo_hi = ci.get("interruptions_per_day")
    table.add_row("interruptions per day", f"{data['interruptions_per_day']:.3f}",
                  f"{lo_hi[0]:.3f} .. {lo_hi[1]:.3f}" if lo_hi else "")
    if data.get("mtbi_s"):
        table.add_row("mean time between interruptions (h)", f"{data['mtbi_s'] / 3600:.3f}", "")
    horizon = data["inputs"]["horizon_s"]
    for cause, sec in data["lost_seconds_by_cause"].items():
        c = ci.get("lost_seconds_by_cause", {}).get(cause)
        table.add_row(f"lost to {cause} (h, % of wall)", f"{sec / 3600:.2f} ({sec / horizon:.2%})",
                      f"{c[0] / 3600:.2f} .. {c[1] / 3600:.2f}" if c else "")
    console.print(table)
    for line in data.get("warnings") or []:
        console.print(f"warning: {line}", style="yellow", markup=False)


@scenario_command("simulate")
def simulate_cmd(
    sc: Scenario,
    replications: int = typer.Option(1000, help="Independent replications (vectorised)."),
    seed: int = typer.Option(0, help="Random seed (same inputs and seed: byte-identical JSON)."),
    timeline: Path | None = typer.Option(None, help="Write replication 0's timeline (.csv or .json)."),
    timeline_bin: str | None = typer.Option(None, help="Timeline bin (default: one step, or horizon/2000 if longer)."),
    plot: Path | None = typer.Option(None, help="Write replication 0's throughput over time as an SVG."),
    as_json: bool = AS_JSON,
) -> None:
    """Discrete-time-step Monte Carlo: availability, ETTR, interruptions, time lost by cause, with 95% CIs."""
    from windtunnel.avail.sim import simulate
    from windtunnel.avail.timeline import (
        build_timeline,
        timeline_csv,
        timeline_json,
        timeline_svg,
        timeline_text,
    )
    from windtunnel.avail.units import parse_duration
    from windtunnel.specs.yamlio import write_atomic

    want_tl = timeline is not None or plot is not None or not as_json
    from windtunnel.cli.progress import progress_reporter

    with progress_reporter() as progress, progress.busy(f"avail simulate: {replications:,} replications"):
        res = simulate(sc, replications, seed, keep_timeline=want_tl)
    data = res.to_json_dict()
    tl = None
    if want_tl and res.timeline is not None:
        bin_s = parse_duration(timeline_bin, "timeline-bin", allow_zero=False) if timeline_bin is not None else None
        tl = build_timeline(res.timeline, sc, bin_s)
        if timeline is not None:
            write_atomic(timeline, timeline_json(tl) if timeline.suffix == ".json" else timeline_csv(tl))
        if plot is not None:
            write_atomic(plot, timeline_svg(tl, f"useful throughput, replication 0 ({sc.profile_id}, {sc.policy.kind})"))
    if as_json:
        _emit_json(data)
        return
    _summary_table(f"avail simulate: {sc.devices} devices, {sc.profile_id}, {sc.policy.kind}, "
                   f"{replications} replications", data)
    if tl is not None:
        sys.stdout.write("useful throughput of replication 0:\n" + timeline_text(tl, width=72, y_min=0.5))
    sys.stdout.write("".join(f"- {a}\n" for a in data["assumptions"]))


@scenario_command("markov")
def markov_cmd(
    sc: Scenario,
    phases: int | None = typer.Option(None, help="Erlang stages for detection and restart (default: exact for "
                                                 "exponential durations, extrapolated 16/32 for fixed ones)."),
    as_json: bool = AS_JSON,
) -> None:
    """Continuous-time Markov chain over (nodes in repair, job phase), solved exactly (steady state)."""
    from windtunnel.avail.markov import solve_markov

    data = solve_markov(sc, phases).to_json_dict(sc)
    if as_json:
        _emit_json(data)
        return
    _summary_table(f"avail markov: {sc.devices} devices, {sc.profile_id}, {sc.policy.kind} ({data['states']} states)", data)


@scenario_command("optimize")
def optimize_cmd(
    sc: Scenario,
    knob: list[str] = typer.Option(["checkpoint-every"], help="checkpoint-every, spares, policy, or target "
                                                                "(what reaches --target-availability from this "
                                                                "scenario, as `avail target`). Repeatable."),
    target_availability: float = typer.Option(0.98, help="Availability target for --knob target."),
    replications: int = typer.Option(200, help="Replications for the simulated checkpoint optimum."),
    seed: int = typer.Option(0, help="Random seed."),
    as_json: bool = AS_JSON,
) -> None:
    """Best checkpoint interval (Young, Daly, Markov, simulated), spare pool, recovery policy, availability target."""
    from windtunnel.avail.formulas import daly_interval_s, young_interval_s
    from windtunnel.avail.optimize import (
        compare_policies,
        markov_checkpoint_optimum,
        optimize_spares,
        simulated_checkpoint_optimum,
    )
    from windtunnel.specs.errors import WindtunnelError, choices_text

    knobs = ("checkpoint-every", "spares", "policy", "target")
    if not 0.0 < target_availability < 1.0:
        raise WindtunnelError(f"Field 'target-availability' is {target_availability}; give a fraction between 0 and 1 "
                              "(e.g. 0.98).", field="target-availability")
    bad = [k for k in knob if k not in knobs]
    if bad:
        raise WindtunnelError(f"Unknown knob '{bad[0]}' (field 'knob'); valid knobs: {choices_text(knobs)}.", field="knob")
    out: dict = {"inputs": sc.inputs(), "assumptions": list(sc.assumptions), "warnings": sc.warnings()}
    for k in knob:
        if k == "checkpoint-every":
            mtbf = 1.0 / sc.rates.failure_rate_per_s
            stall = sc.mechanics.stall
            sim = simulated_checkpoint_optimum(sc, replications, seed)
            out["checkpoint_every"] = {"mtbf_s": mtbf, "checkpoint_stall_s": stall,
                                       "young_s": young_interval_s(stall, mtbf), "daly_s": daly_interval_s(stall, mtbf),
                                       "markov_optimum_s": markov_checkpoint_optimum(sc),
                                       "simulated_optimum_s": sim["simulated_optimum_s"],
                                       "grid_s": sim["grid_s"], "ettr": sim["ettr"]}
        elif k == "spares":
            out["spares"] = optimize_spares(sc)
        elif k == "policy":
            out["policy"] = compare_policies(sc)
        else:
            from windtunnel.avail.target import availability_target as scenario_target

            out["target"] = scenario_target(sc, availability=target_availability, replications=replications, seed=seed)
    if as_json:
        _emit_json(out)
        return
    if "checkpoint_every" in out:
        c = out["checkpoint_every"]
        console.print(f"checkpoint interval: Young {c['young_s']:.0f} s, Daly {c['daly_s']:.0f} s, Markov optimum "
                      f"{c['markov_optimum_s']:.0f} s, simulated optimum {c['simulated_optimum_s']:.0f} s "
                      f"(MTBF {c['mtbf_s'] / 3600:.2f} h, stall {c['checkpoint_stall_s']:.0f} s)")
    if "spares" in out:
        table = Table(title="spare pool (Markov)")
        for col in ("spares", "availability", "ettr", "P(waiting for repair)"):
            table.add_column(col, justify="right")
        for r in out["spares"]["rows"]:
            table.add_row(str(r["spares"]), f"{r['availability']:.4%}", f"{r['ettr']:.4%}", f"{r['p_waiting_for_repair']:.2e}")
        console.print(table)
        console.print(f"smallest pool within 0.1% of the best ETTR: {out['spares']['best_spares']} nodes")
    if "policy" in out:
        table = Table(title="recovery policies (Markov)")
        for col in ("policy", "detect s", "restart s", "rollback", "availability", "ettr"):
            table.add_column(col)
        for r in out["policy"]["rows"]:
            table.add_row(r["policy"], f"{r['detect_s']:g}", f"{r['restart_s']:g}", r["rollback"],
                          f"{r['availability']:.4%}", f"{r['ettr']:.4%}")
        console.print(table)
    if "target" in out:
        from windtunnel.cli.avail_target import print_target

        print_target(out["target"], console)
    elif out.get("warnings"):
        sys.stdout.write("".join(f"warning: {w}\n" for w in out["warnings"]))


@scenario_command("target")
def target_cmd(
    sc: Scenario,
    availability: float = typer.Option(0.98, help="Target availability (fraction of wall time running), e.g. 0.98."),
    ettr: float | None = typer.Option(None, help="Also a target ETTR (useful progress / wall time), e.g. 0.95."),
    replications: int = typer.Option(100, help="Replications re-simulating the chosen point."),
    seed: int = typer.Option(0, help="Random seed."),
    as_json: bool = AS_JSON,
) -> None:
    """What reaches a target availability (and ETTR) from these inputs: failure rate, detection, restart,
    repair, spares, checkpoint interval, each moved alone (Markov); the chosen point re-simulated."""
    from windtunnel.avail.target import availability_target
    from windtunnel.cli.avail_target import print_target

    out = availability_target(sc, availability=availability, ettr=ettr, replications=replications, seed=seed)
    if as_json:
        _emit_json(out)
        return
    print_target(out, console)


@avail_app.command("checkpoint-interval")
def checkpoint_interval_cmd(
    mtbf: str = typer.Option(..., help="Mean time between failures of the job, e.g. 24h."),
    checkpoint_cost: str = typer.Option(..., help="Checkpoint (dump) time, e.g. 5min."),
    restart: str = typer.Option("10min", help="Restart time, e.g. 10min."),
    simulate: bool = typer.Option(False, "--simulate", help="Also find the optimum of the step simulation."),
    replications: int = typer.Option(200, help="Replications for --simulate."),
    seed: int = typer.Option(0, help="Random seed for --simulate."),
    as_json: bool = AS_JSON,
) -> None:
    """Young's and Daly's optimum checkpoint interval (and, with --simulate, the simulated optimum)."""
    from windtunnel.avail.optimize import checkpoint_interval
    from windtunnel.avail.units import parse_duration

    out = checkpoint_interval(parse_duration(mtbf, "mtbf", allow_zero=False),
                              parse_duration(checkpoint_cost, "checkpoint-cost"), parse_duration(restart, "restart"),
                              simulate=simulate, replications=replications, seed=seed)
    if as_json:
        _emit_json(out)
        return
    line = f"Young {out['young_s'] / 60:.2f} min, Daly {out['daly_s'] / 60:.2f} min, exact {out['exact_s'] / 60:.2f} min"
    if simulate:
        line += f", simulated optimum {out['simulated_optimum_s'] / 60:.2f} min"
    console.print(line)


@avail_app.command("mttf")
def mttf_cmd(
    failures_per_1000_node_days: float = typer.Option(..., help="Failure rate per node (per 1000 node-days)."),
    devices: int = typer.Option(..., help="Devices in the job."),
    devices_per_node: int = typer.Option(8, help="Devices per node."),
    as_json: bool = AS_JSON,
) -> None:
    """Job mean time to failure from a per-node failure rate: 1 / (nodes x rate)."""
    from windtunnel.avail.formulas import mttf_s

    value = mttf_s(failures_per_1000_node_days, devices, devices_per_node)
    out = {"failures_per_1000_node_days": failures_per_1000_node_days, "devices": devices,
           "devices_per_node": devices_per_node, "nodes": -(-devices // devices_per_node), "mttf_s": value,
           "mttf_h": value / 3600.0, "mttf_days": value / 86400.0}
    if as_json:
        _emit_json(out)
    else:
        console.print(f"MTTF of a {devices}-device job: {value / 3600:.3g} h ({value / 86400:.3g} days)")


@avail_app.command("serve")
def serve_cmd(
    instances: int | None = typer.Option(None, help="Serving instances (without --deployment)."),
    devices_per_instance: int | None = typer.Option(None, help="Devices per instance (without --deployment)."),
    model: str | None = typer.Option(None, help="With --deployment and --traffic: the model Sim2Infer serves."),
    hardware: str | None = typer.Option(None, help="With --deployment: chip or cluster id."),
    deployment: str | None = typer.Option(None, help="A Sim2Infer deployment, e.g. mixed:tp=8,replicas=4: goodput "
                                          "of every degraded state comes from Sim2Infer (no typed goodput)."),
    traffic: str | None = typer.Option(None, help="With --deployment: the traffic (as `infer simulate --traffic`)."),
    slo: str = typer.Option("ttft=2s,tpot=100ms", help="With --deployment: latency objectives."),
    max_lost: int = typer.Option(3, help="With --deployment: most instances lost per pool that are simulated."),
    devices_per_node: int = typer.Option(8, help="Devices per node."),
    faults: str = FAULTS,
    policy: str = typer.Option("hot-spare", help="Recovery policy (detection and restart times are used)."),
    goodput_per_instance: float = typer.Option(1.0, help="SLO goodput of one instance (requests/s, from Sim2Infer)."),
    load: float | None = typer.Option(None, help="Offered load (requests/s); default: the full deployment's goodput."),
    target: float = typer.Option(1.0, help="Fraction of the load that must be served within the SLO (with "
                                 "--deployment: the SLO attainment to keep; 1.0 there means 0.99)."),
    horizon: str = typer.Option("30d", help="Simulated wall time per replication."),
    replications: int = typer.Option(0, help="Also simulate with this many replications."),
    seed: int = typer.Option(0, help="Random seed."),
    as_json: bool = AS_JSON,
) -> None:
    """Capacity availability of a serving deployment and the time its SLO goodput stays above a target."""
    from windtunnel.avail.serving import serving_availability
    from windtunnel.avail.units import parse_duration
    from windtunnel.specs.errors import WindtunnelError

    horizon_s = parse_duration(horizon, "horizon", allow_zero=False)
    if not 0.0 < target <= 1.0:
        raise WindtunnelError(f"Field 'target' is {target}; give a fraction in (0, 1], e.g. 0.9.", field="target")
    if deployment is not None:
        from windtunnel.cli.avail_target import print_serve
        from windtunnel.serve_avail import serve_availability

        if replications:
            raise WindtunnelError("avail serve --deployment solves the degraded states exactly (Markov); "
                                  "--replications applies to the typed --instances form only.", field="replications")
        if model is None or hardware is None or traffic is None:
            raise WindtunnelError("avail serve --deployment needs --model, --hardware and --traffic (Sim2Infer runs the "
                                  "deployment on that traffic).", field="deployment")
        out = serve_availability(model, hardware, deployment, traffic, faults=faults, policy=policy, slo=slo,
                                 target=target if target < 1.0 else 0.99, devices_per_node=devices_per_node,
                                 max_lost=max_lost, seed=seed)
        _emit_json(out) if as_json else print_serve(out, console)
        return
    if instances is None or devices_per_instance is None:
        raise WindtunnelError("avail serve needs --deployment with --model, --hardware and --traffic (goodput from "
                              "Sim2Infer), or --instances and --devices-per-instance with a typed "
                              "--goodput-per-instance.", field="deployment")

    out = serving_availability(instances=instances, devices_per_instance=devices_per_instance, faults=faults,
                               policy=policy, devices_per_node=devices_per_node,
                               goodput_per_instance_rps=goodput_per_instance, load_rps=load, target=target,
                               horizon_s=horizon_s, replications=replications, seed=seed)
    if as_json:
        _emit_json(out)
        return
    console.print(f"capacity availability {out['capacity_availability']:.5%}; SLO goodput >= {target:.0%} of load "
                  f"{out['fraction_time_slo_goodput_above_target']:.5%} of the time "
                  f"(needs {out['instances_needed']} of {instances} instances up)")


@avail_app.command("goodput")
def goodput_cmd(
    model: str = typer.Option(..., help="Catalog model id, model YAML or HF config.json."),
    hardware: str = typer.Option(..., help="Chip or cluster id."),
    devices: int = typer.Option(..., help="Devices in the job."),
    seq_len: int = typer.Option(4096, help="Sequence length."),
    global_batch: int = typer.Option(..., help="Global batch (sequences)."),
    plan: list[str] = typer.Option(..., help="Parallel plan (repeat to compare plans)."),
    faults: str = FAULTS,
    policy: str = POLICY,
    storage_bandwidth: str = typer.Option("2TB/s", help="Checkpoint storage bandwidth with its unit, e.g. 2TB/s, "
                                          "500GB/s or 400Gb/s."),
    method: str = typer.Option("markov", help="markov or simulate."),
    profile: Path | None = typer.Option(None, help="Calibration profile of the chip for the step times (from "
                                        "`windtunnel calibrate ... --out`; not a fault profile, see --faults)."),
    what_if: list[str] = typer.Option([], "--what-if", help="Hardware what-if KEY=VALUE for the step times "
                                      "(repeatable; VALUE xF or a quantity with its unit): shown beside the base."),
    as_json: bool = AS_JSON,
) -> None:
    """Failure-aware goodput: tokens/s from Sim2Train times ETTR from Sim2Availability, for each plan."""
    from windtunnel.api import failure_aware_goodput
    from windtunnel.job.units import parse_bandwidth

    bandwidth = parse_bandwidth(storage_bandwidth)

    def run(what: list[str] | None) -> list[dict]:
        return failure_aware_goodput(model, hardware, devices, seq_len=seq_len, global_batch=global_batch, plans=plan,
                                     faults=faults, policy=policy, storage_bandwidth_bytes_per_s=bandwidth,
                                     method=method, profile=profile, what_if=what)

    rows = run(None)
    variant = {"what_if": ",".join(what_if), "rows": run(what_if)} if what_if else None
    if as_json:
        _emit_json({"rows": rows, **({"variant": variant} if variant else {})})
        return
    _goodput_table(rows, f"failure-aware goodput: {model} on {devices} x {hardware}")
    if variant:
        _goodput_table(variant["rows"], f"what-if {variant['what_if']}: {model} on {devices} x {hardware}")


def _goodput_table(rows: list[dict], title: str) -> None:
    table = Table(title=title)
    for col in ("plan", "tokens/s", "rank", "ETTR", "goodput tokens/s", "rank with faults"):
        table.add_column(col, overflow="fold")  # a plan wraps whole, never cut to 'tp=1,pp=1,mbs…'
    for r in rows:
        if r["goodput_tokens_per_s"] is None:
            table.add_row(r["plan"], "infeasible", "", "", "", "")
            continue
        table.add_row(r["plan"], f"{r['tokens_per_s']:.4g}", str(r["rank_fault_free"]), f"{r['ettr']:.4f}",
                      f"{r['goodput_tokens_per_s']:.4g}", str(r["rank_with_faults"]))
    console.print(table)


@avail_app.command("profiles")
def profiles_cmd(
    devices: int = typer.Option(16384, help="Job size for the per-job rates shown."),
    devices_per_node: int = typer.Option(8, help="Devices per node."),
    as_json: bool = AS_JSON,
) -> None:
    """List the built-in fault profiles with their job-level failure rates."""
    from windtunnel.avail.faults import load_faults, profile_names
    from windtunnel.avail.optimize import job_rate_summary

    out = {name: {"name": load_faults(name).name, **job_rate_summary(load_faults(name), devices, devices_per_node)}
           for name in profile_names()}
    if as_json:
        _emit_json(out)
        return
    for name, row in out.items():
        console.print(f"catalog:{name}: {row['name']} - {row['failures_per_day']:.3g} failures/day at {devices} devices "
                      f"({row['failures_per_1000_node_days']:.3g} per 1000 node-days)", markup=False)


@avail_app.command("report")
def report_cmd(
    out: Path = typer.Option(Path("validation/AVAILABILITY.md"), help="Where to write the Markdown report."),
    quick: bool = typer.Option(False, "--quick", help="Fewer replications (for a smoke test)."),
) -> None:
    """Run every Done-when check of Sim2Availability and write the report (validation/AVAILABILITY.md)."""
    from windtunnel.api import failure_aware_goodput
    from windtunnel.avail.report import build_report
    from windtunnel.cli.progress import progress_reporter
    from windtunnel.specs.yamlio import write_atomic

    with progress_reporter() as progress, progress.busy("avail report"):
        text = build_report(failure_aware_goodput, quick=quick)
    write_atomic(out, text)
    console.print(f"report written to {out}")
