"""CLI verbs that turn measurements of the user's own machines into a profile: ``calibrate collectives``
(nccl-tests / hccl-tests logs), ``calibrate trace`` (a PyTorch profiler trace of one training step) and
``probe`` (microbenchmarks on local devices, the ``[torch]`` extra). Attach them with :func:`register`.

Every verb prints the fit (``--json``: ``parameters`` with name, value, prior, bounds, identified;
``loo_median_abs_error``; ``rows_used``; ``fit``) and, with ``--out``, writes or merges the profile
(:func:`windtunnel.profile.save_profile`; never into the installed package).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:
    from windtunnel.profile import FittedParameter

console = Console(soft_wrap=True)

HARDWARE_HELP = "Chip id (its default cluster), cluster id, or cluster YAML the measurements ran on."


def _emit_json(data: dict) -> None:
    from windtunnel.report.jsonout import dumps as strict_json

    sys.stdout.write(strict_json(data, indent=2, sort_keys=True) + "\n")


def parameter_rows(parameters: list[FittedParameter]) -> list[dict]:
    """The JSON contract's parameter entries."""
    return [{"name": p.name, "value": p.value, "prior": p.prior, "bounds": list(p.bounds), "identified": p.identified,
             "stderr": p.stderr, "source": p.source} for p in parameters]


def write_profile(out: Path, chip: str, stack: str | None, parameters: list[FittedParameter], inputs: list[dict],
                  fit_key: str, fit: dict) -> list[str]:
    """Write/merge the profile at ``out``; an unidentified parameter never replaces one the file already has.
    Returns the names written."""
    from windtunnel.profile import Profile, load_profile, save_profile

    existing = set()
    if out.exists():
        existing = {p.name for p in load_profile(out).parameters}
    kept = [p for p in parameters if p.identified or p.name not in existing]
    save_profile(Profile(chip=chip, stack=stack, parameters=kept, inputs=inputs, fit={fit_key: fit}), out)
    return [p.name for p in kept]


def _report(command: str, parameters: list[FittedParameter], loo: float | None, rows_used: int, fit: dict,
            out: Path | None, as_json: bool, extra: dict) -> None:
    if as_json:
        _emit_json({"command": command, "parameters": parameter_rows(parameters), "loo_median_abs_error": loo,
                    "rows_used": rows_used, "fit": fit, "out": str(out) if out else None, **extra})
        return
    for p in parameters:
        state = "fitted" if p.identified else "prior kept"
        err = f" +- {p.stderr:.3g}" if p.stderr else ""
        console.print(f"{p.name:32s} {p.value:<12.5g}{err:12s} prior {p.prior:<10.5g} ({state})")
    loo_text = "n/a" if loo is None else f"{loo:.2%}"
    console.print(f"rows used {rows_used}; leave-one-out median |error| {loo_text}")
    for warning in fit.get("warnings", []):
        console.print(f"[yellow]warning[/]: {warning}")
    if out is not None:
        console.print(f"profile written: {out}")


def calibrate_collectives(
    logs: list[Path] = typer.Argument(..., help="nccl-tests (*_perf) or hccl-tests (*_test) output files."),
    hardware: str = typer.Option(..., help=HARDWARE_HELP),
    cluster: str | None = typer.Option(None, help="Cluster id or YAML (overrides --hardware's default cluster)."),
    collective: str | None = typer.Option(None, help="The benchmark that ran, when the log does not say: all_reduce, "
                                          "all_gather, reduce_scatter, all_to_all, send_recv."),
    ranks: int | None = typer.Option(None, help="hccl-tests: total NPUs (mpirun -n), when the log does not echo it."),
    ranks_per_node: int | None = typer.Option(None, help="hccl-tests: NPUs per node (-p), when not echoed."),
    domain_ranks: int | None = typer.Option(None, help="Ranks per scale-up domain (default: per host; give it for "
                                            "rack-scale domains such as NVL72, whose hosts share one NVLink domain)."),
    out: Path | None = typer.Option(None, help="Write or merge the profile here (YAML)."),
    as_json: bool = typer.Option(False, "--json", help="Print the fit as JSON."),
) -> None:
    """Fit collective efficiency per tier and the half-bandwidth message size to benchmark logs."""
    from windtunnel.profiling.collective_bench import read_bench_logs
    from windtunnel.profiling.fit_collectives import fit_collectives
    from windtunnel.specs.errors import WindtunnelError
    from windtunnel.specs.hardware import load_hardware

    target = cluster or hardware
    if cluster is not None:
        chip = load_hardware(cluster, 1).chip.id
        if hardware != chip and hardware != cluster:
            raise WindtunnelError(f"--cluster '{cluster}' is built of chip '{chip}', but --hardware is '{hardware}'; "
                                  "give matching values (or only one of them).", field="hardware")
    bench = read_bench_logs(logs, collective, ranks, ranks_per_node)
    result = fit_collectives(bench, target, domain_ranks)
    fit = result.fit_stats()
    inputs = [{"kind": log.tool, "path": log.path, "collective": log.collective, "ranks": log.ranks,
               "hosts": log.hosts, "rows": len(log.rows)} for log in bench]
    if out is not None:
        write_profile(out, result.chip, None, result.parameters, inputs, "collectives", fit)
    _report("calibrate collectives", result.parameters, result.loo_median_abs_error, result.rows_used, fit, out,
            as_json, {"chip": result.chip, "cluster": result.cluster})


def calibrate_trace(
    trace: Path = typer.Argument(..., help="PyTorch profiler (Kineto) chrome trace JSON of one or more steps."),
    model: str = typer.Option(..., help="Catalog model id, model YAML, or Hugging Face config.json."),
    hardware: str = typer.Option(..., help=HARDWARE_HELP),
    devices: int = typer.Option(..., help="Number of devices in the traced job."),
    seq_len: int = typer.Option(4096, help="Sequence length (tokens)."),
    global_batch: int = typer.Option(..., help="Global batch (sequences per step)."),
    plan: str = typer.Option("", help="The traced job's plan, as for train simulate."),
    framework: str = typer.Option("megatron", help="Training stack (as for train simulate)."),
    moe_imbalance: float = typer.Option(1.1, help="Tokens on the busiest expert rank / the balanced share."),
    rank: int = typer.Option(0, help="Pipeline rank (stage) the trace was taken on."),
    device: str | None = typer.Option(None, help="Device id in the trace (args.device) when it holds several."),
    steps: int | None = typer.Option(None, help="Steps the trace covers when it has no ProfilerStep# annotations."),
    gaps: bool = typer.Option(False, "--gaps", help="Also fit kernel_overhead_s from the median gap between kernels "
                              "(only for traces where the host keeps ahead of the device)."),
    out: Path | None = typer.Option(None, help="Write or merge the profile here (YAML)."),
    as_json: bool = typer.Option(False, "--json", help="Print the fit as JSON."),
) -> None:
    """Fit GEMM, attention and memory-bound efficiency to the kernels of a traced training step."""
    from windtunnel.api import resolve_model
    from windtunnel.profiling.fit_trace import fit_trace
    from windtunnel.profiling.kineto import read_trace
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.specs.plan import parse_plan
    from windtunnel.train.step import TrainingJob

    spec, dag = resolve_model(model)
    job = TrainingJob(model=spec, cluster=load_hardware(hardware, devices), plan=parse_plan(plan), seq_len=seq_len,
                      global_batch=global_batch, framework=framework, moe_imbalance=moe_imbalance, dag=dag)
    summary = read_trace(trace, device, steps)
    result = fit_trace(summary, job, rank, gaps)
    fit = result.fit_stats()
    inputs = [{"kind": "kineto", "path": str(trace), "steps": summary.steps, "device": summary.device, "model": model,
               "hardware": hardware, "devices": devices, "seq_len": seq_len, "global_batch": global_batch,
               "plan": plan, "framework": framework, "rank": rank}]
    if out is not None:
        write_profile(out, result.chip, result.stack, result.parameters, inputs, "trace", fit)
    _report("calibrate trace", result.parameters, None, result.rows_used, fit, out, as_json,
            {"chip": result.chip, "stack": result.stack})


def probe(
    out: Path | None = typer.Option(None, help="Write or merge the profile here (YAML)."),
    quick: bool = typer.Option(False, "--quick", help="Fewer shapes and iterations (about a minute)."),
    hardware: str | None = typer.Option(None, help="Catalog chip id of the local devices (default: detected)."),
    record: Path | None = typer.Option(None, help="Also save the raw measurements (JSON) here."),
    from_record: Path | None = typer.Option(None, "--from-record", help="Fit a saved probe record instead of "
                                            "measuring (no torch or device needed)."),
    as_json: bool = typer.Option(False, "--json", help="Print the fit as JSON."),
) -> None:
    """Microbenchmark the local devices (GEMM, flash attention, memory copy, collectives) into a profile."""
    from windtunnel.profiling.fit_probe import fit_probe, read_record
    from windtunnel.profiling.probe import run_probe
    from windtunnel.specs.yamlio import write_atomic

    if from_record is not None:
        data = read_record(from_record)
    else:
        data = run_probe(quick=quick, chip=hardware)
        if record is not None:
            from windtunnel.report.jsonout import dumps as strict_json

            write_atomic(record, strict_json(data, indent=1, sort_keys=True) + "\n")
    result = fit_probe(data, hardware)
    fit = result.fit_stats()
    inputs = [{"kind": "probe", "path": str(from_record or record or ""), "device": data.get("device", ""),
               "torch": data.get("torch", "")}]
    if out is not None:
        write_profile(out, result.chip, None, result.parameters, inputs, "probe", fit)
    _report("probe", result.parameters, result.loo_median_abs_error, result.rows_used, fit, out, as_json,
            {"chip": result.chip})


def register(calibrate_app: typer.Typer, app: typer.Typer) -> None:
    """Attach ``calibrate collectives``, ``calibrate trace`` and ``probe`` to the CLI's Typer apps."""
    calibrate_app.command("collectives")(calibrate_collectives)
    calibrate_app.command("trace")(calibrate_trace)
    app.command("probe")(probe)
