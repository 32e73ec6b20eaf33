"""The `windtunnel` command: one subcommand group per pillar, a thin layer over windtunnel.api."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console

from windtunnel.specs.errors import WindtunnelError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="windtunnel: rehearse LLM training and serving on a simulated cluster.")
train_app = typer.Typer(no_args_is_help=True, help="Sim2Train: training step time, MFU, memory.")
validate_app = typer.Typer(no_args_is_help=True, help="Score predictions on published measurements.")
calibrate_app = typer.Typer(no_args_is_help=True, help="Fit efficiency curves on calibration rows.")
catalog_app = typer.Typer(no_args_is_help=True, help="List the built-in catalog.")
app.add_typer(train_app, name="train")
app.add_typer(validate_app, name="validate")
app.add_typer(calibrate_app, name="calibrate")
app.add_typer(catalog_app, name="catalog")

console = Console()


def _emit_json(data: dict) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


@train_app.command("simulate")
def train_simulate(
    model: str = typer.Option(..., help="Catalog model id, model YAML, or Hugging Face config.json."),
    hardware: str = typer.Option(..., help="Chip id (uses its default cluster), cluster id, or cluster YAML."),
    devices: int = typer.Option(..., help="Number of devices in the job."),
    seq_len: int = typer.Option(4096, help="Sequence length (tokens)."),
    global_batch: int = typer.Option(..., help="Global batch (sequences per step)."),
    plan: str = typer.Option("", help="Plan, e.g. tp=8,pp=16,cp=1,vpp=1,mbs=1,recompute=selective,sp=true,zero=1"),
    moe_imbalance: float = typer.Option(1.1, help="Tokens on the busiest expert rank / the balanced share."),
    no_flash: bool = typer.Option(False, "--no-flash", help="Unfused attention (scores materialised)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    trace: Path | None = typer.Option(None, help="Write the simulated step as a Chrome trace (Perfetto)."),
) -> None:
    """Simulate one training step of MODEL on HARDWARE with a parallel PLAN."""
    from windtunnel.api import simulate_training
    from windtunnel.report.tables import training_table
    from windtunnel.report.trace import trace_json
    from windtunnel.specs.yamlio import write_atomic

    result = simulate_training(model, hardware, devices, seq_len=seq_len, global_batch=global_batch, plan=plan,
                               flash_attention=not no_flash, moe_imbalance=moe_imbalance, keep_trace=trace is not None)
    if trace is not None:
        write_atomic(trace, trace_json(result.trace, title=f"{result.model} {result.plan}"))
    if as_json:
        _emit_json(result.to_json_dict())
    else:
        training_table(result, console)
        if trace is not None:
            console.print(f"trace written to {trace} (open in https://ui.perfetto.dev)")


@validate_app.command("training")
def validate_training(
    csv_path: Path = typer.Argument(..., help="CSV in the schema of shared/reference/training_runs.csv."),
    out: Path | None = typer.Option(None, help="Write the Markdown report here (e.g. validation/REPORT.md)."),
    as_json: bool = typer.Option(False, "--json", help="Print rows and summary as JSON."),
) -> None:
    """Predict every row of a training-measurement CSV and report the errors."""
    from rich.table import Table

    from windtunnel.specs.yamlio import write_atomic
    from windtunnel.validation import read_rows, report_markdown, summarize, validate_rows

    rows = read_rows(csv_path)
    results = validate_rows(rows)
    summary = summarize(results)
    if out is not None:
        write_atomic(out, report_markdown(results, summary, str(csv_path)))
    if as_json:
        _emit_json({"rows": [r.as_dict() for r in results], "summary": summary})
        return
    table = Table(title=f"training validation: {csv_path}")
    for column in ("id", "group", "metric", "measured", "predicted", "error", "role", "status"):
        table.add_column(column)
    for r in results:
        table.add_row(r.id, r.group, r.metric, "" if r.measured is None else f"{r.measured:.4g}",
                      "" if r.predicted is None else f"{r.predicted:.4g}",
                      "" if r.error is None else f"{r.error * 100:+.1f}%", r.role, r.status[:60])
    console.print(table)
    med, mx = summary["median_abs_error"], summary["max_abs_error"]
    console.print(f"validation rows: {summary['n_validation']}, median |error| "
                  f"{'n/a' if med is None else f'{med:.1%}'}, max |error| {'n/a' if mx is None else f'{mx:.1%}'}; "
                  f"predicted {summary['n_predicted']}, skipped {summary['n_skipped']}")
    if out is not None:
        console.print(f"report written to {out}")


@calibrate_app.command("training")
def calibrate_training(
    csv_path: Path = typer.Argument(..., help="CSV in the schema of shared/reference/training_runs.csv."),
    as_json: bool = typer.Option(False, "--json", help="Print the fit as JSON."),
) -> None:
    """Fit GEMM efficiencies on the calibration rows and write catalog/calibration.yaml."""
    from windtunnel.validation import calibrate, read_rows

    report = calibrate(read_rows(csv_path))
    if as_json:
        _emit_json(report)
    else:
        for generation, fit in report.items():
            values = ", ".join(f"{k} {v:.3f}" for k, v in fit["parameters"].items())
            console.print(f"{generation}: {values} (rows {', '.join(fit['rows'])}; rms log error {fit['rms_log_error']:.3f})")


@catalog_app.command("list")
def catalog_list(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """List catalog chips, clusters and models."""
    from windtunnel.specs.hardware import chip_names, cluster_names
    from windtunnel.specs.model import model_names

    data = {"chips": chip_names(), "clusters": cluster_names(), "models": model_names()}
    if as_json:
        _emit_json(data)
    else:
        for key, values in data.items():
            console.print(f"[bold]{key}[/]: {', '.join(values)}")


def main() -> None:
    """Entry point: user errors become one clear message and exit code 2, never a traceback."""
    try:
        app()
    except WindtunnelError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
