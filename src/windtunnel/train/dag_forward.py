"""Forward-only serving of an imported operator DAG (ONNX): latency of a batch and throughput.

The same stage graphs as training (sharded by the plan's tp, cut into its pp stages) are played
forward only, one batch of ``batch`` samples per replica: the latency is the sum of the stages'
forward times and the sends between them; pipelined batches leave a stage every ``max(stage time)``,
so a replica serves ``batch / max(stage time)`` samples/s and the job ``devices / (tp * pp)`` replicas.
Weights are held in 16-bit; activations are the peak of the tensors alive at once in a forward pass
(freed after their last reader, 16-bit, split by tp). Units: seconds, samples/s, bytes.
"""

from __future__ import annotations

from windtunnel.cost.collectives import p2p_time
from windtunnel.specs.errors import WindtunnelError


def simulate_dag_inference(model: str, hardware: str, devices: int, *, batch: int, batch_shape=None, plan: str = "",
                           framework: str = "megatron") -> dict:
    """Forward-only serving of ``model`` (an ONNX path or ``onnx:NAME``) with ``batch`` samples per replica."""
    from windtunnel.graph.graph_model import check_graph_plan
    from windtunnel.graph.resolve import resolve_model
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.specs.plan import parse_plan
    from windtunnel.train.memory import WEIGHT_BYTES
    from windtunnel.train.step import TrainingJob, _StepBuilder

    spec, dag = resolve_model(model, batch_shape)
    if dag is None or not hasattr(dag, "imported"):
        what = ("a per-rank operator-DAG YAML (one repeated layer, for training)" if dag is not None
                else "not an ONNX model")
        raise WindtunnelError(f"Model '{model}' is {what}; forward-only DAG serving needs a whole-model graph: X.onnx, "
                              "onnx:NAME or windtunnel.capture(module, inputs) (LLM serving: windtunnel infer simulate "
                              "with a catalog model or config.json).", field="model")
    if batch < 1:
        raise WindtunnelError(f"Field 'batch' must be a positive number of samples, got {batch}.", field="batch")
    given = parse_plan(plan)
    given = given.model_copy(update={"sp": False, "tp_overlap": False, "recompute": "none", "mbs": batch})
    check_graph_plan(given)
    cluster = load_hardware(hardware, devices)
    replicas = devices // (given.tp * given.pp) if devices % (given.tp * given.pp) == 0 else 0
    if not replicas:
        raise WindtunnelError(f"Devices ({devices}) must be divisible by tp*pp = {given.tp * given.pp}.", field="devices")
    job = TrainingJob(model=spec, cluster=cluster, plan=given.model_copy(update={"dp": replicas}), seq_len=1,
                      global_batch=batch * replicas, dag=dag, framework=framework)
    builder = _StepBuilder(job)
    stage_times = [sum(builder.played(kind, "fwd").time for kind in stage) for stage in builder.dag_stages]
    send = 2.0 * batch * builder.job.model.hidden  # the activation a stage sends on (bytes)
    hop = p2p_time(send, builder.placement.pp_tier, cluster, builder.eff) if given.pp > 1 else 0.0
    latency = sum(stage_times) + hop * (given.pp - 1)
    interval = max(max(stage_times), hop)
    weights = max(sum(builder.layer_params(k)[0] for k in stage) for stage in builder.dag_stages) * WEIGHT_BYTES
    activations = peak_activation_bytes(dag.imported(batch)) / given.tp
    return {"model": spec.id, "hardware": cluster.id, "chip": cluster.chip.id, "devices": devices,
            "plan": f"tp={given.tp},pp={given.pp},replicas={replicas}", "batch": batch,
            "batch_shape": dag.imported(batch).bindings, "latency_s": latency, "stage_times_s": stage_times,
            "samples_per_s": replicas * batch / interval, "samples_per_s_per_device": batch / interval / (given.tp * given.pp),
            "forward_flops_per_batch": dag.model_flops(batch), "weight_bytes_per_device": weights,
            "activation_bytes_per_device": activations, "memory_bytes_per_device": weights + activations,
            "memory_capacity_bytes": cluster.chip.hbm_bytes,
            "fits_memory": weights + activations <= cluster.chip.hbm_bytes}


def peak_activation_bytes(imported) -> float:
    """The most activation bytes alive at once when the nodes run in order, forward only (bytes, one replica
    before tensor parallelism): a tensor lives from its producer to its last reader; views alias their input."""
    alias: dict[str, str] = {}
    last: dict[str, int] = {}
    for i, node in enumerate(imported.nodes):
        for t in node.inputs:
            last[alias.get(t, t)] = i
        if node.kind == "view":
            for t in node.outputs:
                alias[t] = alias.get(node.inputs[0], node.inputs[0]) if node.inputs else t
    for t in imported.graph_outputs:
        last[alias.get(t, t)] = len(imported.nodes)
    live, peak = 0.0, 0.0
    for i, node in enumerate(imported.nodes):
        if node.kind != "view":
            live += sum(imported.tensor_bytes.get(t, 0.0) for t in node.outputs)
        peak = max(peak, live)
        for t in set(node.inputs):
            root = alias.get(t, t)
            if last.get(root) == i:
                live -= imported.tensor_bytes.get(root, 0.0)
    return peak
