"""`windtunnel graph show` and `graph infer` (forward-only serving): an imported model's operators, FLOPs, bytes and parameters (JSON contract below).

``graph show MODEL [--batch-shape NAME=VALUE,...] --json`` prints ``operators`` (count of costed
operators), ``forward_flops`` (one sample of the bound shapes, FLOPs), ``parameters``,
``parameter_bytes`` (as stored in the file), ``unsupported`` (ONNX operators the wind tunnel cannot
cost, each with its node; simulating the model then is an error naming the first), and beside them
``operators_by_kind``, ``forward_bytes`` and ``saved_activation_bytes`` (bytes, 16-bit activations).
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.table import Table

graph_app = typer.Typer(no_args_is_help=True, help="Operator graphs of imported models (ONNX).")
BATCH_SHAPE_HELP = ("Symbolic ONNX dimensions of one sample, NAME=VALUE,... (e.g. nodes=2048,edges=16384); the "
                    "remaining batch dimension, if any, is the micro-batch.")


@graph_app.command("show")
def graph_show(
    model: str = typer.Argument(..., help="An ONNX file (X.onnx) or a shipped example (onnx:resnet50, "
                                "onnx:bert-large, onnx:molecule-mpnn)."),
    batch_shape: str = typer.Option("", help=BATCH_SHAPE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Operators, FLOPs, bytes and parameters of MODEL for one sample of the bound shapes."""
    from windtunnel.graph.graph_model import GraphModel, onnx_path
    from windtunnel.graph.onnx_import import parse_batch_shape
    from windtunnel.specs.errors import WindtunnelError

    path = onnx_path(model)
    if path is None:
        raise WindtunnelError(f"Model '{model}' is not an ONNX model; give a file ending in .onnx or onnx:NAME.",
                              field="model")
    summary = GraphModel(path, parse_batch_shape(batch_shape), strict=False).summary()
    if as_json:
        from windtunnel.report.jsonout import dumps as strict_json

        sys.stdout.write(strict_json(summary, indent=2, sort_keys=True) + "\n")
        return
    console = Console()
    table = Table(title=f"{summary['model']} ({summary['path']}), one sample of {summary['batch_shape'] or 'fixed shapes'}")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("operators", f"{summary['operators']:,}")
    for kind, count in summary["operators_by_kind"].items():
        table.add_row(f"  {kind}", f"{count:,}")
    table.add_row("forward FLOPs", f"{summary['forward_flops'] / 1e9:,.3f} G")
    table.add_row("forward bytes moved", f"{summary['forward_bytes'] / 1e6:,.1f} MB")
    table.add_row("saved activations", f"{summary['saved_activation_bytes'] / 1e6:,.1f} MB")
    table.add_row("parameters", f"{summary['parameters'] / 1e6:,.2f} M")
    table.add_row("parameter bytes", f"{summary['parameter_bytes'] / 1e6:,.1f} MB")
    console.print(table)
    for item in summary["unsupported"]:
        console.print(f"unsupported: {item}", markup=False)


@graph_app.command("infer")
def graph_infer(
    model: str = typer.Argument(..., help="An ONNX file (X.onnx) or a shipped example (onnx:NAME)."),
    hardware: str = typer.Option(..., help="Chip id (its default cluster), cluster id, or cluster YAML."),
    devices: int = typer.Option(..., help="Devices serving the model (replicas of tp*pp devices)."),
    batch: int = typer.Option(1, help="Samples per batch on each replica."),
    batch_shape: str = typer.Option("", help=BATCH_SHAPE_HELP),
    plan: str = typer.Option("", help="tp and pp of each replica, e.g. tp=2,pp=1."),
    framework: str = typer.Option("megatron", help="Stack whose kernels run the graph (fused elementwise or not)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Forward-only serving of MODEL: latency of one batch and samples/s (train/dag_forward.py)."""
    from windtunnel.train.dag_forward import simulate_dag_inference

    result = simulate_dag_inference(model, hardware, devices, batch=batch, batch_shape=batch_shape or None, plan=plan,
                                    framework=framework)
    if as_json:
        from windtunnel.report.jsonout import dumps as strict_json

        sys.stdout.write(strict_json(result, indent=2, sort_keys=True) + "\n")
        return
    console = Console()
    console.print(f"{result['model']} on {devices} x {result['chip']} ({result['plan']}), batch {batch}: latency "
                  f"{result['latency_s'] * 1e3:.2f} ms, {result['samples_per_s']:,.0f} samples/s "
                  f"({result['samples_per_s_per_device']:,.1f} per device), weights "
                  f"{result['weight_bytes_per_device'] / 2**30:.2f} GiB per device", markup=False)


def register(app: typer.Typer) -> None:
    """Add the `graph` command group to the CLI."""
    app.add_typer(graph_app, name="graph")
