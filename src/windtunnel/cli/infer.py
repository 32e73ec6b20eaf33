"""`windtunnel infer ...`: Sim2Infer on the command line (a thin layer over windtunnel.infer.api).

Registered in cli.py with ``app.add_typer(infer_app, name="infer")``; ``validate inference`` is
:func:`validate_inference_cmd`, registered on the ``validate`` group.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from windtunnel.cli.keys import DEPLOYMENT_KEYS, epilog

infer_app = typer.Typer(no_args_is_help=True, help="Sim2Infer: LLM serving under traffic (TTFT, TPOT, goodput at "
                                                   "SLO), deployment search, dynamic prefill/decode role switching.")
console = Console()
DEPLOYMENT_EPILOG = epilog(DEPLOYMENT_KEYS, "windtunnel infer deployment-keys")

MODEL = typer.Option(..., help="Catalog model id, model YAML, or Hugging Face config.json.")
HARDWARE = typer.Option(..., help="Chip id (its default cluster), cluster id, or cluster YAML.")
TRAFFIC = typer.Option(..., help="poisson:rate=R,input=DIST,output=DIST | gamma:rate=R,cv=C,... | trace:FILE.csv[,speed=S]"
                                 " | closed:concurrency=N,input=..,output=.. | traffic.yaml")
SLO_OPT = typer.Option("ttft=2s,tpot=100ms", help="Latency objectives, e.g. ttft=2s,tpot=100ms.")
DEFAULT_SLO = "ttft=2s,tpot=100ms"
MODEL_OR_DAG = typer.Option(..., help="Catalog model id, model YAML, Hugging Face config.json, or an operator DAG "
                                      "(X.onnx, onnx:NAME: forward-only serving, cli/infer_dag.py).")
TRAFFIC_OR_RATE = typer.Option(None, help="poisson:rate=R,input=DIST,output=DIST | gamma:rate=R,cv=C,... | "
                                          "trace:FILE.csv[,speed=S] | closed:concurrency=N,... | traffic.yaml (required "
                                          "for an LLM); an ONNX / DAG model: poisson:rate=R or gamma:rate=R,cv=C "
                                          "samples/s (optional: the latency at that load).")
SLO_OR_LATENCY = typer.Option(None, help="Latency objectives: an LLM ttft=2s,tpot=100ms (the default); an ONNX / DAG "
                                         "model latency=50ms (p99 at the --traffic load).")
BATCH_OPT = typer.Option(None, help="ONNX / DAG models: samples per batch on each replica (default 1).")
BATCH_SHAPE_OPT = typer.Option(None, help="ONNX / DAG models: symbolic dimensions of one sample, NAME=VALUE,... "
                                          "(e.g. nodes=2048,edges=16384).")
SEED = typer.Option(0, help="Random seed (same seed, same result).")
AS_JSON = typer.Option(False, "--json", help="Print the result as JSON.")


def _emit_json(data: dict) -> None:
    from windtunnel.report.jsonout import dumps as strict_json

    sys.stdout.write(strict_json(data, indent=2, sort_keys=True) + "\n")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:,.1f}"


def _latency_table(result) -> Table:
    table = Table(title="latency (ms)")
    for column in ("metric", "p50", "p90", "p99", "mean"):
        table.add_column(column, justify="right" if column != "metric" else "left")
    for name, values in (("TTFT", result.ttft_s), ("TPOT", result.tpot_s), ("E2E", result.e2e_s)):
        table.add_row(name, *(_ms(values[k]) for k in ("p50", "p90", "p99", "mean")))
    return table


def print_result(result) -> None:
    """Human-readable summary of a ServingResult."""
    d = result.to_json_dict(timings=True)
    console.print(f"[bold]{d['model']}[/] on [bold]{d['hardware']}[/]: {d['deployment']}  ({d['devices']} devices)")
    t = d["traffic"]
    rate = f", {t['mean_rate_per_s']:.2f} req/s" if t.get("mean_rate_per_s") else ""
    closed = f", closed loop x{t['concurrency']}" if t.get("concurrency") else ""
    console.print(f"traffic: {t['description']} - {t['requests']:,} requests{rate}{closed}, mean input "
                  f"{t['mean_input_tokens']:.0f} / output {t['mean_output_tokens']:.0f} tokens")
    pools = Table(title="instances")
    for column in ("pool", "chip", "precision", "KV tokens", "weights GiB", "batch/tokens"):
        pools.add_column(column, justify="left" if column in ("pool", "chip", "precision") else "right")
    for p in d["pools"]:
        pools.add_row(p["label"], p["chip"], f"{p['precision']}, KV {p['kv_precision']}",
                      f"{p['kv_capacity_tokens_per_instance']:,}", f"{p['weight_bytes_per_device'] / 2**30:.1f}",
                      f"{p['max_batch']}/{p['max_tokens']} {p['batching']}")
    console.print(pools)
    console.print(_latency_table(result))
    th, gp = d["throughput"], d["goodput"]
    console.print(f"throughput: {th['requests_per_s']:.3f} req/s ({th['requests_per_s_per_device']:.4f} per device), "
                  f"{th['output_tokens_per_s']:,.0f} output tokens/s ({th['output_tokens_per_s_per_device']:,.1f} per "
                  f"device), {th['total_tokens_per_s']:,.0f} total tokens/s")
    console.print(f"goodput at SLO ({result.slo.text()}): [bold]{gp['requests_per_s']:.3f} req/s[/] "
                  f"({gp['requests_per_s_per_device']:.4f} per device), SLO attainment {gp['slo_attainment']:.1%}")
    console.print(f"completed {d['completed']:,} of {d['requests']:,} (rejected {d['rejected']}), preemptions "
                  f"{d['preemptions']:,}, KV cache peak {d['kv_cache']['peak_fraction']:.1%} / mean "
                  f"{d['kv_cache']['mean_fraction']:.1%}, makespan {d['makespan_s']:,.1f} s, simulated in "
                  f"{d['wall_s']:.2f} s wall")
    from windtunnel.infer.metrics import load_text

    console.print(load_text(d["load"]))
    if d["prefix_cache"]:
        from windtunnel.infer.prefix import cache_text

        console.print(cache_text(d["prefix_cache"]))
    series = d["series"]
    if series["t_s"]:
        peak_q = max(series["queue"])
        console.print(f"queue length over time: peak {peak_q}, mean {sum(series['queue']) / len(series['queue']):.1f} "
                      "(full series in --json: series.t_s, series.kv_fraction, series.queue)")
    for name, cls in d["per_class"].items():
        console.print(f"  class {name}: {cls['requests']:,} requests, TTFT p90 {_ms(cls['ttft_s']['p90'])} ms, "
                      f"TPOT p90 {_ms(cls['tpot_s']['p90'])} ms, SLO attainment {cls['slo_attainment']:.1%}")
    for line in d.get("warnings") or []:
        console.print(f"warning: {line}", style="yellow", markup=False)


@infer_app.command("deployment-keys")
def deployment_keys_cmd(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """List every key of a deployment pool (role:key=value,...;role:...): values, default, meaning; one line each."""
    from windtunnel.cli.keys import deployment_key_rows, print_keys

    print_keys(deployment_key_rows(), as_json, "deployment keys (mixed:tp=8,replicas=2 | prefill:...;decode:...):")


@infer_app.command("simulate", epilog=DEPLOYMENT_EPILOG)
def simulate_cmd(
    model: str = MODEL_OR_DAG,
    hardware: str = HARDWARE,
    deployment: str | None = typer.Option(None, help="'mixed:tp=8,replicas=2' | 'prefill:ep=32,replicas=2;decode:ep=128' | "
                                             "deployment.yaml (keys: tp dp ep pp replicas max_batch max_tokens batching "
                                             "admission precision kv prefix_hit chip mem_util tbo overhead); required "
                                             "for an LLM. An ONNX / DAG model: tp=T,pp=P,replicas=R (default 1 device)."),
    traffic: str | None = TRAFFIC_OR_RATE,
    slo: str | None = SLO_OR_LATENCY,
    batch: int | None = BATCH_OPT,
    batch_shape: str | None = BATCH_SHAPE_OPT,
    seed: int = SEED,
    router: str | None = typer.Option(None, help="round_robin, least_tokens or kv_aware (overrides the deployment's)."),
    profile: Path | None = typer.Option(None, help="Calibration profile of a chip of the deployment (from `windtunnel "
                                        "calibrate ... --out`): its efficiencies replace the catalog's on that chip."),
    what_if: list[str] = typer.Option([], "--what-if", help="Hardware what-if KEY=VALUE (repeatable; VALUE xF or a "
                                      "quantity with its unit, e.g. hbm_bandwidth=x1.5): shown after the base."),
    as_json: bool = AS_JSON,
    timings: bool = typer.Option(False, "--timings", help="Add the wall-clock seconds the simulation took (wall_s) "
                                 "to --json; without it the same inputs and seed give byte-identical JSON."),
) -> None:
    """Simulate serving TRAFFIC on a DEPLOYMENT of MODEL on HARDWARE: latency percentiles, throughput, goodput
    (an ONNX / operator-DAG model: latency per batch, samples/s, memory, and the latency at a load)."""
    from windtunnel.cli import infer_dag
    from windtunnel.infer.api import simulate_serving

    if infer_dag.is_dag_model(model):
        infer_dag.refuse(router=router, profile=profile, what_if=what_if)
        document = infer_dag.dag_simulate(model, hardware, deployment, traffic, slo, batch, batch_shape)
        _emit_json(document) if as_json else infer_dag.print_dag_serving(document, console)
        return
    infer_dag.refuse_dag_options(batch, batch_shape)
    deployment, traffic, slo = _llm_required(deployment, traffic, slo)
    from windtunnel.cli.progress import progress_reporter

    with progress_reporter() as progress, progress.busy("infer simulate"):
        result = simulate_serving(model, hardware, deployment, traffic, slo=slo, seed=seed, router=router, profile=profile)
    if what_if:
        from windtunnel.infer.explain import serving_variant

        variant, what = serving_variant(model, hardware, deployment, traffic, what_if, result.devices, slo=slo,
                                        seed=seed, router=router, profile=profile)
        if as_json:
            _emit_json({**result.to_json_dict(timings=timings), "what_if": what.label,
                        "variant": variant.to_json_dict(timings=timings)})
            return
        print_result(result)
        console.rule(f"what-if: {what.label}")
        print_result(variant)
        return
    if as_json:
        _emit_json(result.to_json_dict(timings=timings))
    else:
        print_result(result)


def _llm_required(deployment, traffic, slo) -> tuple[str | None, str, str]:
    """An LLM needs --deployment (simulate) and --traffic; its SLO defaults to ttft=2s,tpot=100ms."""
    from windtunnel.specs.errors import WindtunnelError

    for name, value in (("deployment", deployment), ("traffic", traffic)):
        if value is None:
            raise WindtunnelError(f"Option '--{name}' is missing: an LLM is served on a deployment under traffic "
                                  "(see --help).", field=name)
    return deployment, traffic, slo or DEFAULT_SLO


@infer_app.command("search", epilog=DEPLOYMENT_EPILOG)
def search_cmd(
    model: str = MODEL_OR_DAG,
    hardware: str = HARDWARE,
    devices: int = typer.Option(..., help="Device budget (objective goodput: the fixed number of devices)."),
    traffic: str | None = TRAFFIC_OR_RATE,
    slo: str | None = SLO_OR_LATENCY,
    batch_shape: str | None = BATCH_SHAPE_OPT,
    attainment: float = typer.Option(0.99, help="SLO attainment a deployment must reach (fraction of requests)."),
    objective: str | None = typer.Option(None, help="devices (fewest devices that serve the traffic; default), cost "
                                         "(lowest cost; default with --price) or goodput (most goodput at the "
                                         "attainment within --devices)."),
    price: str | None = typer.Option(None, help="Price per device-hour, e.g. 2.5/device-hour or EUR1.9/npu-hour "
                                     "(reports cost; objective cost)."),
    seed: int = SEED,
    top: int = typer.Option(10, help="Deployments to show."),
    baseline: str | None = typer.Option(None, help="A deployment to compare with at the same offered load."),
    mode: str = typer.Option("both", help="both, disaggregated or colocated."),
    router: str | None = typer.Option(None, help="Router of every candidate (e.g. cache_aware for a trace with block "
                                      "hashes; default: least_tokens)."),
    requests: int = typer.Option(1500, help="Screen candidates on the traffic's first N requests (0 = all); winners "
                                 "are re-simulated on all of them."),
    backend: str = typer.Option("local", help="local (processes on this machine) or ray."),
    address: str | None = typer.Option(None, help="Ray cluster address ('auto' joins a running cluster)."),
    workers: int | None = typer.Option(None, help="Local processes (default: all cores)."),
    as_json: bool = AS_JSON,
    report: Path | None = typer.Option(None, help="Write a self-contained HTML report."),
    what_if: list[str] = typer.Option([], "--what-if", help="Search on what-if hardware, KEY=VALUE (repeatable; "
                                      "VALUE xF or a quantity with its unit)."),
    wide: bool = typer.Option(False, "--wide", help="Full-width table (default: fits 80 columns)."),
) -> None:
    """Search deployments within a device budget that serve TRAFFIC at an SLO attainment target (progress on stderr);
    an ONNX / DAG model: tp, pp, batch and replicas, the fewest devices meeting --slo latency=... at the load."""
    from windtunnel.cli import infer_dag
    from windtunnel.cli.progress import progress_reporter

    if infer_dag.is_dag_model(model):
        infer_dag.refuse(objective=objective, price=price, baseline=baseline, router=router, report=report,
                         what_if=what_if, address=address)
        document = infer_dag.dag_search(model, hardware, devices, traffic, slo, batch_shape, top)
        _emit_json(document) if as_json else infer_dag.print_dag_search(document, console)
        return
    infer_dag.refuse_dag_options(None, batch_shape)
    _, traffic, slo = _llm_required("", traffic, slo)
    from windtunnel.job.units import parse_device_hour_price

    # A price carries its unit, as `train job --price` does: a bare number is refused, not read as USD.
    price_value, currency = parse_device_hour_price(price) if price is not None else (None, "")
    from windtunnel.infer.explain import searched_hardware
    from windtunnel.infer.search import search_deployments
    from windtunnel.infer.search_report import search_table, write_search_html
    from windtunnel.search.backends import make_backend

    hardware, named, cleanup = searched_hardware(hardware, devices, what_if)
    runner = make_backend(backend, address=address, workers=workers)
    try:
        with progress_reporter() as progress:
            document = search_deployments(model, hardware, devices, traffic, slo=slo, seed=seed, top=top,
                                          baseline=baseline, mode=mode, requests=requests or None, workers=workers,
                                          attainment=attainment, objective=objective if objective is not None else ("cost" if price else "devices"),
                                          price_per_device_hour=price_value, currency=currency, backend=runner,
                                          progress=progress,
                                          router=router)
    finally:
        runner.close()
        cleanup()
    if what_if:
        document.update(hardware=named, what_if=",".join(what_if))
    if report is not None:
        write_search_html(document, report)
    if as_json:
        _emit_json(document)
    else:
        search_table(document, console, wide=wide)
        for line in document.get("warnings") or []:
            console.print(f"warning: {line}", style="yellow", markup=False)
        if report is not None:
            console.print(f"written: {report}")


@infer_app.command("dynamic")
def dynamic_cmd(
    model: str = MODEL,
    hardware: str = HARDWARE,
    deployment: str = typer.Option(..., help="The static disaggregated deployment to start from."),
    traffic: str = TRAFFIC,
    slo: str = SLO_OPT,
    seed: int = SEED,
    switch_cost: str = typer.Option("30s", help="Time an instance is out of service while it changes role."),
    interval: str = typer.Option("15s", help="How often the policy looks at the load."),
    as_json: bool = AS_JSON,
) -> None:
    """Compare a static prefill/decode deployment with a policy that moves instances between the roles."""
    from windtunnel.cli.progress import progress_reporter
    from windtunnel.infer.dynamic import compare_dynamic, dynamic_table

    with progress_reporter() as progress, progress.busy("infer dynamic"):
        document = compare_dynamic(model, hardware, deployment, traffic, slo=slo, seed=seed, switch_cost=switch_cost,
                                   interval=interval)
    if as_json:
        _emit_json(document)
    else:
        dynamic_table(document, console)


@infer_app.command("autoscale")
def autoscale_cmd(
    model: str = MODEL,
    hardware: str = HARDWARE,
    deployment: str = typer.Option(..., help="The deployment at its most replicas (each pool scales up to its count)."),
    traffic: str = TRAFFIC,
    slo: str = SLO_OPT,
    seed: int = SEED,
    startup: str = typer.Option("60s", help="Time a started replica takes before it serves (it holds its devices)."),
    interval: str = typer.Option("15s", help="How often the autoscaler looks at the load."),
    target: float = typer.Option(0.99, help="SLO attainment the best static replica count must reach."),
    as_json: bool = AS_JSON,
) -> None:
    """Compare every static replica count with an autoscaler that starts and stops replicas as the load moves."""
    from windtunnel.cli.progress import progress_reporter
    from windtunnel.infer.autoscale import autoscale_table, compare_autoscale

    with progress_reporter() as progress, progress.busy("infer autoscale"):
        document = compare_autoscale(model, hardware, deployment, traffic, slo=slo, seed=seed, startup=startup,
                                     interval=interval, target=target)
    if as_json:
        _emit_json(document)
    else:
        autoscale_table(document, console)


def validate_inference_cmd(
    csv_path: Path = typer.Argument(..., help="CSV in the schema of shared/reference/inference_runs.csv."),
    out: Path | None = typer.Option(None, help="Write the Markdown report here (e.g. validation/INFERENCE_REPORT.md)."),
    as_json: bool = typer.Option(False, "--json", help="Print rows and summary as JSON."),
    wide: bool = typer.Option(False, "--wide", help="Full-width table (default: fits 80 columns)."),
) -> None:
    """Predict every row of an inference-measurement CSV and report the errors."""
    from windtunnel.cli.progress import progress_reporter
    from windtunnel.validation import inference as validation
    from windtunnel.validation.rows import run_validation

    with progress_reporter() as progress:
        run_validation(validation, "inference", csv_path, out, as_json, console, _emit_json, progress=progress,
                       wide=wide)


@infer_app.command("calibrate")
def calibrate_cmd(
    csv_path: Path = typer.Argument(..., help="CSV in the schema of shared/reference/inference_runs.csv."),
    out: Path | None = typer.Option(None, "--out", help="File the fitted serving parameters are written to (YAML)."),
    as_json: bool = AS_JSON,
) -> None:
    """Fit the serving parameters on the calibration rows and write them to --out (never into the package)."""
    from windtunnel.specs.errors import WindtunnelError
    from windtunnel.validation.inference import calibrate, read_rows

    if out is None:
        raise WindtunnelError("Option '--out' is missing: `infer calibrate` writes the fitted serving parameters to a "
                              "file of yours (e.g. --out my-serving-fit.yaml) and never into the installed package. "
                              "(The shipped serving calibration is regenerated by the developer script "
                              "validation/fit_serving_calibration.py.)", field="out")

    report = calibrate(read_rows(csv_path), write=False, out=out)
    if as_json:
        _emit_json(report)
    else:
        for scope, fit in report.items():
            values = ", ".join(f"{k} {v:.4g}" for k, v in fit["parameters"].items())
            console.print(f"{scope}: {values} (rows {', '.join(fit['rows'])}; rms log error {fit['rms_log_error']:.3f})")
