"""ONNX import: FLOPs against closed forms, symbolic dimensions, and clear errors for bad models."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

from conftest import assert_one_clear_error
from windtunnel.graph.graph_model import GraphModel, onnx_path
from windtunnel.graph.onnx_examples import bert_large, resnet50
from windtunnel.graph.onnx_import import import_onnx, parse_batch_shape
from windtunnel.specs.errors import WindtunnelError


def _resnet50_macs(image: int = 224) -> float:
    """Closed form: multiply-accumulates of ResNet-50 v1.5 convolutions and the classifier per image."""
    macs = (image // 2) ** 2 * 3 * 64 * 49  # stem 7x7/2
    size, cin = image // 4, 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for index in range(blocks):
            out = size // stride if index == 0 else size
            macs += size * size * cin * width                 # 1x1 reduce (before the stride)
            macs += out * out * width * width * 9             # 3x3 (carries the stride, v1.5)
            macs += out * out * width * 4 * width             # 1x1 expand
            if index == 0:
                macs += out * out * cin * 4 * width           # projection shortcut
            size, cin = out, 4 * width
    return macs + 2048 * 1000


def _save(tmp_path, model, name="m.onnx"):
    path = tmp_path / name
    onnx.save_model(model, str(path))
    return path


def test_resnet50_flops_match_the_closed_form(tmp_path):
    graph = import_onnx(_save(tmp_path, resnet50()), {}, 1)
    macs = _resnet50_macs()
    assert graph.forward_flops == pytest.approx(2.0 * macs, rel=1e-9)
    # The usual "4.1 GFLOPs" of ResNet-50 at 224x224 counts multiply-accumulates: within 2%.
    assert graph.forward_flops / 2.0 == pytest.approx(4.1e9, rel=0.02)
    assert graph.parameters == pytest.approx(25.6e6, rel=0.01)


def test_the_batch_dimension_is_the_micro_batch(tmp_path):
    path = _save(tmp_path, resnet50())
    one, eight = import_onnx(path, {}, 1), import_onnx(path, {}, 8)
    assert eight.forward_flops == pytest.approx(8 * one.forward_flops)
    assert eight.bindings == {"N": 8}


def test_bert_large_flops_are_twice_params_per_token_plus_attention(tmp_path):
    path = _save(tmp_path, bert_large())
    graph = import_onnx(path, {"seq": 128, "masked": 20}, 1)
    layer = 12 * 1024 * 1024  # q, k, v, out (4h^2) + FFN (8h^2) weights per layer
    attention = 2 * 2 * 128 * 128 * 1024  # scores and context per layer
    head = 20 * (1024 * 1024 + 1024 * 30522)
    expected = 24 * (2 * 128 * layer + attention) + 2 * head
    assert graph.forward_flops == pytest.approx(expected, rel=1e-6)


def test_graph_nodes_without_a_shape_binding_are_one_clear_error(tmp_path):
    path = _save(tmp_path, bert_large())
    with pytest.raises(WindtunnelError, match="seq, masked"):
        import_onnx(path, {}, 1)
    with pytest.raises(WindtunnelError, match="tokens"):
        import_onnx(path, {"tokens": 3}, 1)


def _with_unsupported(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu_0"),
             helper.make_node("FancyOp", ["h"], ["y"], name="my_custom_node", domain="com.example")]
    model = helper.make_model(helper.make_graph(nodes, "custom", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    return _save(tmp_path, model, "custom.onnx")


def test_an_unsupported_operator_is_one_clear_error_naming_it_and_its_node(tmp_path, cli):
    path = _with_unsupported(tmp_path)
    with pytest.raises(WindtunnelError, match="FancyOp.*my_custom_node"):
        GraphModel(path)
    proc = cli("train", "simulate", "--model", str(path), "--hardware", "a100-80g", "--devices", "8",
               "--global-batch", "64")
    line = assert_one_clear_error(proc, "FancyOp", "my_custom_node", "Supported ONNX operators")
    assert "Conv" in line
    shown = cli("graph", "show", str(path), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["unsupported"] == ["FancyOp (domain 'com.example') at node 'my_custom_node'"]


def test_a_malformed_file_is_one_clear_error(tmp_path, cli):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x07not a protobuf at all\xff\xff")
    proc = cli("graph", "show", str(path))
    assert_one_clear_error(proc, "broken.onnx", "not a readable ONNX file")


def test_graph_show_json_contract(cli):
    proc = cli("graph", "show", "onnx:molecule-mpnn", "--batch-shape", "nodes=2048,edges=16384", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    for key in ("operators", "forward_flops", "parameters", "parameter_bytes", "unsupported"):
        assert key in doc
    assert doc["batch_shape"] == {"nodes": 2048, "edges": 16384}
    assert doc["unsupported"] == [] and doc["operators"] > 100
    assert set(doc["operators_by_kind"]) >= {"gemm", "gather", "memory"}
    small = json.loads(cli("graph", "show", "onnx:molecule-mpnn", "--batch-shape", "nodes=1024,edges=8192",
                           "--json").stdout)
    assert doc["forward_flops"] == pytest.approx(2 * small["forward_flops"], rel=1e-6)  # readout is per graph


def test_batch_shape_text_and_model_names():
    assert parse_batch_shape("nodes=2048, edges=16384") == {"nodes": 2048, "edges": 16384}
    with pytest.raises(WindtunnelError, match="nodes=abc"):
        parse_batch_shape("nodes=abc")
    assert onnx_path("onnx:resnet50").is_file()
    with pytest.raises(WindtunnelError, match="resnet50"):
        onnx_path("onnx:nope")
