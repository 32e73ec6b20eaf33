"""Imported operator DAGs as trainable models: branches and mixed blocks, TP sharding rules with their
collectives, pipeline cuts, and the plan search over a DAG."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

from windtunnel import simulate_training
from windtunnel.cost.compute import compute_op_time
from windtunnel.cost.efficiency import efficiency_for
from windtunnel.graph.dag_parallel import build_forward
from windtunnel.graph.graph_model import GraphModel
from windtunnel.graph.onnx_examples import _Builder
from windtunnel.graph.onnx_import import import_onnx
from windtunnel.graph.ops import backward_of
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_chip

TOKENS, HIDDEN, FFN = 8192, 4096, 16384


def _mlp(tmp_path):
    """x -> column-parallel MatMul -> Gelu -> row-parallel MatMul -> y (a transformer MLP as ONNX)."""
    b = _Builder()
    h = b.op("Gelu", [b.op("MatMul", ["x", b.weight("w1", [HIDDEN, FFN])], "fc1")], "gelu")
    y = b.op("MatMul", [h, b.weight("w2", [FFN, HIDDEN])], "fc2")
    model = b.model("mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["tokens", HIDDEN])],
                    [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["tokens", HIDDEN])])
    model.opset_import[0].version = 20
    path = tmp_path / "mlp.onnx"
    onnx.save_model(model, str(path))
    return path


def _gemm_times(graph, chip, eff):
    return [compute_op_time(op, chip, eff, "bf16") for op in graph.ops if op.kind == "gemm"]


def test_tp2_halves_each_matmul_per_rank_and_adds_the_all_reduce(tmp_path):
    imported = import_onnx(_mlp(tmp_path), {"tokens": TOKENS}, 1)
    chip = load_chip("h100-sxm")
    eff = efficiency_for(chip)
    one, _, params1, _ = build_forward(imported, 1)
    two, _, params2, _ = build_forward(imported, 2)
    for op1, op2 in zip((op for op in one.ops if op.kind == "gemm"), (op for op in two.ops if op.kind == "gemm"),
                        strict=True):
        assert op2.flops == pytest.approx(op1.flops / 2)
    # Half the work each; the row-parallel GEMM's halved reduction runs a little less efficiently (k_half).
    for t1, t2 in zip(_gemm_times(one, chip, eff), _gemm_times(two, chip, eff), strict=True):
        assert t1 / 2 * 0.99 <= t2 <= t1 / 2 * 1.15
    assert [op.kind for op in one.ops if op.is_comm] == []
    comms = [op for op in two.ops if op.is_comm]
    assert [(op.kind, op.group) for op in comms] == [("all_reduce", "tp")]
    assert comms[0].bytes_moved == pytest.approx(2.0 * TOKENS * HIDDEN)  # the 16-bit output of fc2
    assert comms[0].deps == (two.ops.index(next(op for op in two.ops if op.name.startswith("fc2"))),)
    assert sum(params2) == pytest.approx(sum(params1) / 2)
    # Column then row: fc1 keeps k and splits n; fc2 splits k.
    fc1, fc2 = (op for op in two.ops if op.kind == "gemm")
    assert fc1.shape == (TOKENS, FFN // 2, HIDDEN) and fc2.shape == (TOKENS, HIDDEN, FFN // 2)
    # The backward turns the all-reduce of the output into the all-reduce of the input gradient.
    assert [op.kind for op in backward_of(two).ops if op.is_comm] == ["all_reduce"]


def test_tp2_on_the_simulator_halves_compute_and_reports_tp_comm(tmp_path):
    path = str(_mlp(tmp_path))
    run = dict(seq_len=1, global_batch=8, batch_shape={"tokens": TOKENS})
    one = simulate_training(path, "h100-sxm", 8, plan="tp=1,mbs=1,zero=0", **run)
    two = simulate_training(path, "h100-sxm", 8, plan="tp=2,mbs=2,zero=0", **run)
    assert "tp_comm" not in one.breakdown and two.breakdown["tp_comm"] > 0
    # One micro-batch per replica either way; with tp=2 each rank does half the FLOPs of a micro-batch
    # twice the size: the same compute time, plus the all-reduces.
    assert two.breakdown["compute"] == pytest.approx(one.breakdown["compute"], rel=0.05)
    assert two.peak_memory_bytes < one.peak_memory_bytes


def test_a_branched_dag_with_two_block_types_simulates():
    # molecule-mpnn: MPNN message blocks (gather src/dst, edge network, scatter-add) and
    # equivariant-attention blocks (radial network, per-edge einsums, edge softmax), with residual branches.
    graph = GraphModel("src/windtunnel/catalog/models/onnx/molecule-mpnn.onnx", {"nodes": 2048, "edges": 16384})
    nodes = graph.imported(1).nodes
    assert {"Gather", "ScatterND", "Einsum", "Concat", "LayerNormalization"} <= {n.op_type for n in nodes}
    result = simulate_training(graph, "ascend-910b", 16, seq_len=1, global_batch=64, plan="mbs=1,zero=1")
    assert result.feasible and result.step_time_s > 0
    assert result.breakdown["compute"] > 0.9 * result.step_time_s * 0.5
    piped = simulate_training(graph, "ascend-910b", 16, seq_len=1, global_batch=64, plan="pp=2,mbs=1,zero=1")
    assert piped.feasible and "bubble" in piped.breakdown


def test_pipeline_stages_balance_the_dag():
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.specs.plan import parse_plan
    from windtunnel.train.step import TrainingJob, _StepBuilder

    graph = GraphModel("src/windtunnel/catalog/models/onnx/bert-large.onnx")
    job = TrainingJob(model=graph.stub(), cluster=load_hardware("a100-80g", 8), plan=parse_plan("pp=4,mbs=8,sp=false"),
                      seq_len=1, global_batch=64, dag=graph)
    builder = _StepBuilder(job)
    assert len(builder.dag_stages) == 4
    times = [sum(builder.played(kind, "fwd").time for kind in stage) for stage in builder.dag_stages]
    assert max(times) < 1.35 * min(times)
    assert builder.job.model.hidden > 1  # the activation sent between stages sizes the pipeline's p2p
    params = sum(builder.layer_params(k)[0] for stage in builder.dag_stages for k in stage)
    assert params == pytest.approx(graph.imported(1).parameters, rel=0.01)


def test_transformer_only_plan_fields_are_clear_errors():
    with pytest.raises(WindtunnelError, match="'cp'"):
        simulate_training("onnx:resnet50", "a100-80g", 8, seq_len=1, global_batch=64, plan="cp=2,mbs=8")
    with pytest.raises(WindtunnelError, match="'recompute'"):
        simulate_training("onnx:resnet50", "a100-80g", 8, seq_len=1, global_batch=64, plan="recompute=full,mbs=8")


def test_train_search_runs_on_a_dag_model(cli):
    proc = cli("train", "search", "--model", "onnx:resnet50", "--hardware", "a100-80g", "--devices", "8",
               "--global-batch", "512", "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["plans"] and doc["plans"][0]["rank"] == 1
    steps = [row["step_time_s"] for row in doc["plans"]]
    assert steps == sorted(steps)
    assert any("tp=2" in row["plan"] for row in doc["plans"]) or doc["candidates"]["refined"] > 20
    assert doc["candidates"]["enumerated"] > doc["candidates"]["refined"]


def test_train_simulate_cli_with_batch_shape(cli):
    proc = cli("train", "simulate", "--model", "onnx:molecule-mpnn", "--hardware", "ascend-910b", "--devices", "16",
               "--batch-shape", "nodes=2048,edges=16384", "--global-batch", "64", "--plan", "mbs=2,zero=1", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["feasible"] and doc["global_batch"] == 64 and doc["seq_len"] == 1


def test_forward_only_serving_of_a_dag(cli):
    from windtunnel.train.dag_forward import simulate_dag_inference

    one = simulate_dag_inference("onnx:resnet50", "a100-80g", 8, batch=64)
    assert one["latency_s"] > 0 and one["samples_per_s"] == pytest.approx(8 * 64 / one["latency_s"])
    piped = simulate_dag_inference("onnx:resnet50", "a100-80g", 8, batch=64, plan="pp=2")
    # Two stages: a longer path per batch, but a new batch every (slowest) stage time.
    assert piped["latency_s"] > max(piped["stage_times_s"]) and len(piped["stage_times_s"]) == 2
    proc = cli("graph", "infer", "onnx:resnet50", "--hardware", "a100-80g", "--devices", "8", "--batch", "64", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["latency_s"] == pytest.approx(one["latency_s"])
    with pytest.raises(WindtunnelError, match="not an ONNX model"):
        simulate_dag_inference("llama3-8b", "a100-80g", 8, batch=1)


def test_side_yaml_annotations_override_the_rules(tmp_path):
    path = _mlp(tmp_path)
    (tmp_path / "mlp.parallel.yaml").write_text("tensor_parallel: {fc1_1: replicate, fc2_3: replicate}\n")
    graph = GraphModel(path, {"tokens": TOKENS})
    assert graph.annotations == {"fc1_1": "replicate", "fc2_3": "replicate"}
    replicated, _, params, _ = build_forward(graph.imported(1), 2, graph.annotations)
    assert not [op for op in replicated.ops if op.is_comm]
    assert sum(params) == pytest.approx(HIDDEN * FFN * 2)
    with pytest.raises(WindtunnelError, match="fc9"):
        build_forward(graph.imported(1), 2, {"fc9": "row"})
    with pytest.raises(WindtunnelError, match="diagonal"):
        build_forward(graph.imported(1), 2, {"fc1_1": "diagonal"})
