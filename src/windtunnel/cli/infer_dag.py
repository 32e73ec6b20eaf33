"""`windtunnel infer simulate|search --model X.onnx`: forward-only serving of an operator DAG (ONNX file,
``onnx:NAME`` or an operator-DAG YAML), routed here from cli/infer.py (train/dag_serving.py does the work).

JSON of ``infer simulate``: ``kind`` (dag_serving), ``deployment`` (tp, pp, replicas), ``batch``,
``batch_shape``, ``latency_per_batch_s``, ``samples_per_s`` (all replicas, batches pipelined),
``samples_per_s_per_device``, ``memory`` (``weight_bytes_per_device``, ``activation_bytes_per_device``,
``total_bytes_per_device``, ``capacity_bytes``, ``fits``), ``load`` (with ``--traffic``: ``utilization``,
``latency_mean_s``, ``latency_p99_s``, null when ``saturated``) and ``slo`` (with ``--slo latency=...``).
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from windtunnel.specs.errors import WindtunnelError

LLM_ONLY = "applies to LLM serving only; an operator-DAG model is served as one forward pass per batch"


def is_dag_model(model: str) -> bool:
    """An ONNX model (X.onnx, onnx:NAME) or an operator-DAG YAML (a ``layer:`` list)."""
    from pathlib import Path

    from windtunnel.graph.graph_model import onnx_path
    from windtunnel.specs.yamlio import read_yaml

    if onnx_path(model) is not None:
        return True
    path = Path(model)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        doc = read_yaml(path)
        return isinstance(doc, dict) and isinstance(doc.get("layer"), list)
    return False


def refuse(**given) -> None:
    """A clear error for the first LLM-only option that was given."""
    for name, value in given.items():
        if value not in (None, [], False):
            raise WindtunnelError(f"Option '--{name.replace('_', '-')}' {LLM_ONLY} (remove it).", field=name)


def refuse_dag_options(batch, batch_shape) -> None:
    """--batch and --batch-shape are for operator-DAG models: a clear error on an LLM."""
    for name, value in (("batch", batch), ("batch-shape", batch_shape)):
        if value is not None:
            raise WindtunnelError(f"Option '--{name}' applies to ONNX / operator-DAG models (forward-only serving); an "
                                  "LLM's batch is the deployment's max_batch and its requests come from --traffic.",
                                  field=name.replace("-", "_"))


def dag_simulate(model, hardware, deployment, traffic, slo, batch, batch_shape) -> dict:
    """The document of `infer simulate` on a DAG model."""
    from windtunnel.train.dag_serving import serve_dag

    return serve_dag(model, hardware, deployment, batch=batch or 1, batch_shape=batch_shape or None, traffic=traffic,
                     slo=slo)


def dag_search(model, hardware, devices, traffic, slo, batch_shape, top) -> dict:
    """The document of `infer search` on a DAG model."""
    from windtunnel.train.dag_serving import search_dag_serving

    return search_dag_serving(model, hardware, devices, traffic=traffic, slo=slo, batch_shape=batch_shape or None,
                              top=top)


def _ms(value) -> str:
    return "saturated" if value is None else f"{value * 1e3:,.2f} ms"


def print_dag_serving(doc: dict, console: Console) -> None:
    """Human-readable `infer simulate` of a DAG model."""
    memory = doc["memory"]
    shape = ",".join(f"{k}={v}" for k, v in doc["batch_shape"].items()) or "fixed shapes"
    console.print(f"{doc['model']} on {doc['devices']} x {doc['chip']} ({doc['deployment']})", markup=False)
    console.print(f"batch {doc['batch']} samples ({shape})", markup=False)
    console.print(f"latency per batch {_ms(doc['latency_per_batch_s'])}, {doc['samples_per_s']:,.0f} samples/s "
                  f"({doc['samples_per_s_per_device']:,.1f} per device)", markup=False)
    console.print(f"memory per device: weights {memory['weight_bytes_per_device'] / 2**30:.2f} GiB + activations "
                  f"{memory['activation_bytes_per_device'] / 2**30:.2f} GiB of {memory['capacity_bytes'] / 2**30:.0f} "
                  f"GiB ({'fits' if memory['fits'] else 'does NOT fit'})", markup=False)
    load = doc["load"]
    if load:
        console.print(f"at {load['rate_samples_per_s']:,.1f} samples/s ({load['traffic']}): utilisation "
                      f"{load['utilization']:.1%}", markup=False)
        console.print(f"latency at load: mean {_ms(load['latency_mean_s'])}, p99 {_ms(load['latency_p99_s'])} "
                      f"(batch fill wait {_ms(load['batch_fill_wait_mean_s'])} mean)", markup=False)
    if doc["slo"]:
        console.print(f"SLO latency p99 <= {doc['slo']['latency_s'] * 1e3:g} ms: "
                      f"{'met' if doc['slo']['met'] else 'NOT met'}", markup=False)


def print_dag_search(doc: dict, console: Console) -> None:
    """Human-readable `infer search` of a DAG model."""
    table = Table(title=f"{doc['model']} on up to {doc['devices']} x {doc['hardware']}"
                  + (f", {doc['traffic']}" if doc["traffic"] else ""))
    columns = ["tp,pp,r", "batch", "devices", "ms/batch", "samples/s", "/device"]
    columns += ["p99 ms", "meets"] if doc["traffic"] else []
    for column in columns:
        table.add_column(column, justify="left" if column.startswith("tp") else "right")
    for row in doc["top"]:
        cells = [row["deployment"].replace("tp=", "").replace("pp=", "").replace("replicas=", ""), str(row["batch"]),
                 str(row["devices"]), f"{row['latency_per_batch_s'] * 1e3:,.2f}", f"{row['samples_per_s']:,.0f}",
                 f"{row['samples_per_s_per_device']:,.0f}"]
        if doc["traffic"]:
            p99 = row["latency_p99_s"]
            cells += ["saturated" if p99 is None else f"{p99 * 1e3:,.2f}", "yes" if row["meets"] else "no"]
        table.add_row(*cells)
    console.print(table)
    if doc["slo_latency_s"] is not None:
        console.print(f"meets: p99 latency at the load <= {doc['slo_latency_s'] * 1e3:g} ms and not saturated; "
                      "fewest devices first", markup=False)
