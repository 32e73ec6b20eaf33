"""Operator-DAG models in YAML: they simulate like the built-in transformer, and bad files are clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import REPO, assert_one_clear_error
from windtunnel import simulate_training
from windtunnel.graph.dag import load_dag
from windtunnel.specs.errors import WindtunnelError

EXAMPLE = REPO / "examples" / "llama3-8b-layer-dag.yaml"
RUN = dict(seq_len=8192, global_batch=64, plan="tp=1,pp=1,mbs=1,recompute=full,zero=1")


def _variant(tmp_path: Path, edit) -> Path:
    doc = yaml.safe_load(EXAMPLE.read_text())
    edit(doc)
    path = tmp_path / "dag.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_hand_written_layer_matches_the_builtin_transformer():
    dag = simulate_training(str(EXAMPLE), "h100-sxm", 8, **RUN)
    builtin = simulate_training("llama3-8b", "h100-sxm", 8, **RUN)
    assert dag.feasible
    # The hand-written file rounds its byte counts and leaves out the builder's per-op host costs,
    # so it is close, not equal.
    assert dag.step_time_s == pytest.approx(builtin.step_time_s, rel=0.05)


def test_host_fields_reach_the_operators(tmp_path):
    def edit(doc):
        doc["layer"][1].update(host_ops=40.0, library_calls=3, host_sync=True)

    graph = load_dag(_variant(tmp_path, edit)).graph("layer")
    qkv = graph.ops[1]
    assert (qkv.host_ops, qkv.library_calls, qkv.host_sync) == (40.0, 3, True)
    assert graph.ops[0].host_ops == 1.0 and not graph.ops[0].host_sync


def test_a_host_sync_before_a_slow_issue_slows_the_step(tmp_path):
    def slow_issue(sync: bool):
        def edit(doc):
            doc["layer"][3].update(host_sync=sync)   # core_attention: the host then waits for rope
            doc["layer"][4].update(host_ops=500.0)   # out_proj: ~7 ms to issue
        return simulate_training(str(_variant(tmp_path, edit)), "h100-sxm", 8, **RUN)

    base = simulate_training(str(EXAMPLE), "h100-sxm", 8, **RUN)
    ahead, synced = slow_issue(False), slow_issue(True)
    # A slow issue costs time even when the host started early; waiting for the device first
    # throws away the head start.
    assert base.step_time_s < ahead.step_time_s < synced.step_time_s
    assert ahead.breakdown["host_overhead"] < synced.breakdown["host_overhead"]


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda doc: doc["layer"][1].update(deps=["nowhere"]), "nowhere"),
    (lambda doc: doc["layer"][0].update(deps=["mlp_residual"]), "cycle"),
    (lambda doc: doc["layer"][1].pop("m"), "m"),
    (lambda doc: doc["layer"][1].update(host_ops=-1), "host_ops"),
])
def test_bad_dag_is_one_clear_error(tmp_path, edit, needle):
    with pytest.raises(WindtunnelError, match=needle):
        load_dag(_variant(tmp_path, edit))


def test_bad_dag_on_the_cli_exits_2_without_traceback(tmp_path, cli):
    path = _variant(tmp_path, lambda doc: doc["layer"][1].update(deps=["nowhere"]))
    proc = cli("train", "simulate", "--model", str(path), "--hardware", "h100-sxm", "--devices", "8",
               "--seq-len", "8192", "--global-batch", "64")
    assert_one_clear_error(proc, "nowhere")


def test_yaml_dag_takes_conv_gather_and_sparse_kinds(tmp_path):
    doc = {"name": "gnn", "layers": 2, "hidden": 256, "tokens_per_micro_batch": 4096, "params_per_layer": 1.0e5,
           "layer": [{"name": "conv", "kind": "conv", "m": 4096, "n": 256, "k": 576, "bytes": 4.0e6},
                     {"name": "gather", "kind": "gather", "bytes": 8.0e6, "deps": ["conv"]},
                     {"name": "spmm", "kind": "sparse", "flops": 2.0e9, "bytes": 1.6e7, "deps": ["gather"]}]}
    path = tmp_path / "gnn.yaml"
    path.write_text(yaml.safe_dump(doc))
    graph = load_dag(path).graph("layer")
    assert [op.kind for op in graph.ops] == ["conv", "gather", "sparse"]
    result = simulate_training(str(path), "h100-sxm", 8, seq_len=4096, global_batch=8,
                               plan="tp=1,pp=1,mbs=1,recompute=none,zero=1")
    assert result.feasible and result.breakdown["compute"] > 0
    doc["layer"][2].pop("flops")
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(WindtunnelError, match="flops"):
        load_dag(path)
