"""Example ONNX models built in code with ``onnx.helper``: ResNet-50 v1.5, a BERT-large encoder and a
molecular model of the drug-discovery kind (MPNN-style message passing plus an SE(3)-Transformer-like
equivariant attention block, on QM9-sized molecular graphs).

Weights are shape-only initializers (external data that is never written: the wind tunnel reads
shapes, not values), so each file is a few tens of kilobytes. ``python -m windtunnel.graph.onnx_examples
DIR`` writes ``resnet50.onnx``, ``bert-large.onnx``, ``molecule-mpnn.onnx`` and ``se3-transformer.onnx``; the shipped copies live
in ``src/windtunnel/catalog/models/onnx/`` and are addressed as ``onnx:NAME`` (e.g. ``--model onnx:resnet50``).

Architectures: ResNet-50 v1.5 (He et al. 2016; torchvision / NVIDIA DeepLearningExamples variant with
the stride on the 3x3 convolution); BERT-large (Devlin et al. 2019: 24 layers, hidden 1024, 16 heads,
FFN 4096, vocabulary 30522, masked-LM head on the masked positions only, as NVIDIA's pre-training
runs it); the molecular model after Gilmer et al. 2017 (MPNN) and Fuchs et al. 2020 / NVIDIA's
SE(3)-Transformer (7 layers, 32 channels, 4 degrees, 8 heads) in a simplified, shape-faithful form.
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper

EXTERNAL = "weights-not-shipped.bin"


class _Builder:
    """Accumulates nodes and shape-only initializers."""

    def __init__(self) -> None:
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def weight(self, name: str, dims: list[int]) -> str:
        tensor = TensorProto()
        tensor.name, tensor.data_type = name, TensorProto.FLOAT
        tensor.dims.extend(dims)
        tensor.data_location = TensorProto.EXTERNAL
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", EXTERNAL
        self.inits.append(tensor)
        return name

    def const(self, name: str, values: list[int]) -> str:
        self.inits.append(helper.make_tensor(name, TensorProto.INT64, [len(values)], values))
        return name

    def op(self, op_type: str, inputs: list[str], prefix: str | None = None, **attrs) -> str:
        out = self.name(prefix or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def model(self, name: str, inputs: list, outputs: list) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="windtunnel")


def resnet50(image: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """ResNet-50 v1.5, NCHW, batch dimension ``N``."""
    b = _Builder()

    def conv_bn(x: str, cin: int, cout: int, kernel: int, stride: int, relu: bool = True) -> str:
        w = b.weight(b.name("w"), [cout, cin, kernel, kernel])
        y = b.op("Conv", [x, w], "conv", kernel_shape=[kernel, kernel], strides=[stride, stride],
                 pads=[kernel // 2] * 4)
        scale, bias = b.weight(b.name("bn_s"), [cout]), b.weight(b.name("bn_b"), [cout])
        mean, var = b.weight(b.name("bn_m"), [cout]), b.weight(b.name("bn_v"), [cout])
        y = b.op("BatchNormalization", [y, scale, bias, mean, var], "bn")
        return b.op("Relu", [y], "relu") if relu else y

    x = conv_bn("image", 3, 64, 7, 2)
    x = b.op("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for index in range(blocks):
            s = stride if index == 0 else 1
            y = conv_bn(x, cin, width, 1, 1)
            y = conv_bn(y, width, width, 3, s)
            y = conv_bn(y, width, 4 * width, 1, 1, relu=False)
            shortcut = conv_bn(x, cin, 4 * width, 1, s, relu=False) if index == 0 else x
            x = b.op("Relu", [b.op("Add", [y, shortcut], "add")], "relu")
            cin = 4 * width
    x = b.op("GlobalAveragePool", [x], "avgpool")
    x = b.op("Flatten", [x], "flatten")
    logits = b.op("Gemm", [x, b.weight("fc_w", [classes, cin]), b.weight("fc_b", [classes])], "fc", transB=1)
    inputs = [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, image, image])]
    outputs = [helper.make_tensor_value_info(logits, TensorProto.FLOAT, ["N", classes])]
    return b.model("resnet50", inputs, outputs)


def bert_large(layers: int = 24, hidden: int = 1024, heads: int = 16, ffn: int = 4096,
               vocab: int = 30522) -> onnx.ModelProto:
    """BERT-large encoder with its masked-LM head; dims ``batch`` (free), ``seq`` and ``masked``
    (predicted positions per sequence), e.g. --batch-shape seq=128,masked=20."""
    b = _Builder()
    ids = "input_ids"
    words = b.op("Gather", [b.weight("word_embeddings", [vocab, hidden]), ids], "embed")
    positions = b.op("Gather", [b.weight("position_embeddings", [512, hidden]), "position_ids"], "embed_pos")
    x = b.op("Add", [words, positions], "embed_add")
    x = b.op("LayerNormalization", [x, b.weight("emb_ln_s", [hidden]), b.weight("emb_ln_b", [hidden])], "ln",
             axis=-1)
    head_dim = hidden // heads
    split = b.const("split_heads", [0, 0, heads, head_dim])
    merge = b.const("merge_heads", [0, 0, hidden])

    def linear(x: str, cin: int, cout: int) -> str:
        y = b.op("MatMul", [x, b.weight(b.name("w"), [cin, cout])], "matmul")
        return b.op("Add", [y, b.weight(b.name("b"), [cout])], "bias")

    for _ in range(layers):
        q, k, v = (b.op("Transpose", [b.op("Reshape", [linear(x, hidden, hidden), split], "reshape")], "transpose",
                        perm=perm) for perm in ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3]))
        scores = b.op("Div", [b.op("MatMul", [q, k], "scores"), b.weight(b.name("scale"), [1])], "scale")
        probs = b.op("Dropout", [b.op("Softmax", [scores], "softmax", axis=-1)], "dropout")
        context = b.op("Transpose", [b.op("MatMul", [probs, v], "context")], "transpose", perm=[0, 2, 1, 3])
        attn = linear(b.op("Reshape", [context, merge], "reshape"), hidden, hidden)
        x = b.op("LayerNormalization", [b.op("Add", [attn, x], "residual"), b.weight(b.name("ln_s"), [hidden]),
                                        b.weight(b.name("ln_b"), [hidden])], "ln", axis=-1)
        h = b.op("Gelu", [linear(x, hidden, ffn)], "gelu")
        y = linear(h, ffn, hidden)
        x = b.op("LayerNormalization", [b.op("Add", [y, x], "residual"), b.weight(b.name("ln_s"), [hidden]),
                                        b.weight(b.name("ln_b"), [hidden])], "ln", axis=-1)
    # Masked-LM head on the masked positions only (gathered rows), then the tied-size decoder.
    picked = b.op("GatherElements", [x, "masked_positions"], "pick_masked", axis=1)
    h = b.op("Gelu", [linear(picked, hidden, hidden)], "gelu")
    h = b.op("LayerNormalization", [h, b.weight("mlm_ln_s", [hidden]), b.weight("mlm_ln_b", [hidden])], "ln", axis=-1)
    logits = b.op("LogSoftmax", [linear(h, hidden, vocab)], "mlm_logsoftmax", axis=-1)
    inputs = [helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info("masked_positions", TensorProto.INT64, ["batch", "masked", hidden])]
    outputs = [helper.make_tensor_value_info(logits, TensorProto.FLOAT, ["batch", "masked", vocab])]
    model = b.model("bert-large", inputs, outputs)
    model.opset_import[0].version = 20  # Gelu is an ONNX operator from opset 20
    return model


def molecule_mpnn(features: int = 16, edge_features: int = 8, channels: int = 32, degrees: int = 4,
                  heads: int = 8, message_layers: int = 3, attention_layers: int = 4) -> onnx.ModelProto:
    """A molecular property model on batched molecular graphs: ``message_layers`` MPNN edge-network
    blocks (Gilmer et al. 2017) then ``attention_layers`` SE(3)-Transformer-like equivariant attention
    blocks (per-edge radial network producing a kernel over ``degrees`` x ``degrees`` degree pairs,
    keys/values by per-edge einsum, attention by dot products gathered on edges, aggregated by
    scatter-add), and a sum readout. Dims ``nodes`` and ``edges`` (one sample = one molecule; QM9
    averages ~18 atoms), e.g. --batch-shape nodes=18,edges=306 (fully connected)."""
    b = _Builder()
    fibre = channels * degrees * degrees  # channels x (2l+1) summed over l < degrees = degrees^2 components

    def mlp(x: str, cin: int, cout: int, act: bool = True) -> str:
        y = b.op("Add", [b.op("MatMul", [x, b.weight(b.name("w"), [cin, cout])], "matmul"),
                         b.weight(b.name("b"), [cout])], "bias")
        return b.op("Relu", [y], "relu") if act else y

    h = mlp("node_features", features, fibre)
    src, dst = "edge_src", "edge_dst"
    for _ in range(message_layers):
        # Message block: gather both ends, edge network on [h_src, h_dst, e], scatter-add to dst.
        hs = b.op("Gather", [h, src], "gather_src", axis=0)
        hd = b.op("Gather", [h, dst], "gather_dst", axis=0)
        cat = b.op("Concat", [hs, hd, "edge_features"], "concat", axis=1)
        msg = mlp(mlp(cat, 2 * fibre + edge_features, fibre), fibre, fibre, act=False)
        agg = b.op("ScatterND", [h, "edge_dst_index", msg], "scatter_add", reduction="add")
        gate = b.op("Sigmoid", [mlp(agg, fibre, fibre, act=False)], "gate")
        h = b.op("Add", [h, b.op("Mul", [gate, agg], "gated")], "residual")
    pairs = degrees * degrees
    kernel_shape = b.const("kernel_shape", [0, channels, channels * pairs])
    per_channel = b.const("per_channel", [0, channels, pairs])
    per_head = b.const("per_head", [0, heads, fibre // heads])
    flat = b.const("flat", [0, fibre])
    for _ in range(attention_layers):
        # Equivariant attention block (SE(3)-Transformer-like): a radial network per edge gives the
        # kernel over degree pairs; keys and values are per-edge contractions with it.
        radial = mlp(mlp("edge_features", edge_features, channels), channels, channels * channels * pairs, act=False)
        kernel = b.op("Reshape", [radial, kernel_shape], "kernel")
        hs = b.op("Reshape", [b.op("Gather", [h, src], "gather_src", axis=0), per_channel], "reshape")
        keys = b.op("Reshape", [b.op("Einsum", [hs, kernel], "edge_keys", equation="ecp,ecq->eq"), per_head],
                    "reshape")
        values = b.op("Reshape", [b.op("Einsum", [hs, kernel], "edge_values", equation="ecp,ecq->eq"), per_head],
                      "reshape")
        queries = b.op("Gather", [mlp(h, fibre, fibre, act=False), dst], "gather_dst", axis=0)
        logits = b.op("ReduceSum", [b.op("Mul", [b.op("Reshape", [queries, per_head], "reshape"), keys], "qk"),
                                    b.const(b.name("axes"), [2])], "dot", keepdims=1)
        weighted = b.op("Mul", [values, b.op("Exp", [logits], "edge_softmax")], "attend")
        proj = mlp(b.op("Reshape", [weighted, flat], "reshape"), fibre, fibre, act=False)
        agg = b.op("ScatterND", [h, "edge_dst_index", proj], "scatter_add", reduction="add")
        h = b.op("LayerNormalization", [b.op("Add", [h, mlp(agg, fibre, fibre, act=False)], "residual"),
                                        b.weight(b.name("ln_s"), [fibre]), b.weight(b.name("ln_b"), [fibre])],
                 "ln", axis=-1)
    pooled = b.op("ReduceSum", [mlp(h, fibre, channels), b.const("node_axis", [0])], "readout", keepdims=1)
    energy = mlp(mlp(pooled, channels, channels), channels, 1, act=False)
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("node_features", f, ["nodes", features]),
              helper.make_tensor_value_info("edge_features", f, ["edges", edge_features]),
              helper.make_tensor_value_info(src, TensorProto.INT64, ["edges"]),
              helper.make_tensor_value_info(dst, TensorProto.INT64, ["edges"]),
              helper.make_tensor_value_info("edge_dst_index", TensorProto.INT64, ["edges", 1])]
    outputs = [helper.make_tensor_value_info(energy, f, [1, 1])]
    model = b.model("molecule-mpnn", inputs, outputs)
    model.opset_import[0].version = 18  # ScatterND reduction='add' needs opset 16+; ReduceSum axes input 13+
    return model


def se3_transformer(layers: int = 7, channels: int = 32, degrees: int = 4, node_features: int = 6,
                    edge_features: int = 4, div: int = 2) -> onnx.ModelProto:
    """The SE(3)-Transformer of NVIDIA DeepLearningExamples on QM9 at operator granularity: per layer a
    fused radial network for every (input degree, output degree) pair, a TFN convolution per pair (the
    basis contraction, then the radial weights), keys and values from one convolution (values
    ``channels``, keys ``channels / div``), queries per degree, attention by per-degree dot products and
    an edge softmax (scatter-sum, gather, divide), values aggregated by scatter-add, a skip connection
    per degree and the norm nonlinearity (norms, layer norm, ReLU, rescale); then max pooling and an MLP.
    The bases (spherical harmonics times Clebsch-Gordan coefficients, one input per degree pair) are
    inputs, as with ``--precompute_bases``. Dims ``nodes`` and ``edges`` per molecule."""
    b = _Builder()
    f = TensorProto.FLOAT
    pairs = [(di, do) for do in range(degrees) for di in range(degrees)]
    freq = {(di, do): 2 * min(di, do) + 1 for di, do in pairs}
    keys = channels // div
    out_channels = channels + keys  # values and keys from one partial TFN convolution
    inputs = [helper.make_tensor_value_info("edge_features", f, ["edges", edge_features + 1]),
              helper.make_tensor_value_info("edge_src", TensorProto.INT64, ["edges"]),
              helper.make_tensor_value_info("edge_dst", TensorProto.INT64, ["edges"]),
              helper.make_tensor_value_info("edge_dst_index", TensorProto.INT64, ["edges", 1]),
              helper.make_tensor_value_info("node_features", f, ["nodes", node_features])]
    for di, do in pairs:
        inputs.append(helper.make_tensor_value_info(f"basis_{di}_{do}", f, ["edges", 2 * di + 1,
                                                                           freq[(di, do)] * (2 * do + 1)]))

    def linear(x: str, cin: int, cout: int) -> str:
        return b.op("MatMul", [x, b.weight(b.name("w"), [cin, cout])], "matmul")

    def shape(values: list[int]) -> str:
        return b.const(b.name("shape"), values)

    # Degree-0 input features; higher degrees start at zero (a 0-weight lift keeps them in the graph).
    h = {0: b.op("Reshape", [linear("node_features", node_features, channels), shape([0, channels, 1])], "reshape")}
    for d in range(1, degrees):
        h[d] = b.op("Expand", [b.op("Mul", [h[0], b.weight(b.name("zero"), [1])], "lift"),
                               shape([1, channels, 2 * d + 1])], "expand")
    for _ in range(layers):
        width = sum(freq[p] for p in pairs) * channels * out_channels
        r = b.op("Relu", [b.op("LayerNormalization", [linear("edge_features", edge_features + 1, channels),
                                                      b.weight(b.name("s"), [channels]), b.weight(b.name("b"), [channels])],
                               "ln", axis=-1)], "relu")
        r = b.op("Relu", [b.op("LayerNormalization", [linear(r, channels, channels), b.weight(b.name("s"), [channels]),
                                                      b.weight(b.name("b"), [channels])], "ln", axis=-1)], "relu")
        radial = linear(r, channels, width)
        split = [b.name("radial") for _ in pairs]
        b.nodes.append(helper.make_node("Split", [radial, b.const(b.name("sizes"), [freq[p] * channels * out_channels
                                                                                   for p in pairs])],
                                        split, name=b.name("split_radial"), axis=1))
        gathered = {d: b.op("Gather", [h[d], "edge_src"], "gather_src", axis=0) for d in range(degrees)}
        conv = {}
        for (di, do), weights in zip(pairs, split, strict=True):
            k = freq[(di, do)] * channels
            t = b.op("Einsum", [gathered[di], f"basis_{di}_{do}"], "tfn_basis", equation="eci,eif->ecf")
            t = b.op("Reshape", [t, shape([0, k, 2 * do + 1])], "reshape")
            w = b.op("Reshape", [weights, shape([0, out_channels, k])], "reshape")
            y = b.op("Einsum", [w, t], "tfn_radial", equation="eok,ekm->eom")
            conv[do] = y if do not in conv else b.op("Add", [conv[do], y], "tfn_sum")
        logits = None
        values = {}
        for d in range(degrees):
            v, kk = b.name("values"), b.name("keys")
            b.nodes.append(helper.make_node("Split", [conv[d], b.const(b.name("kv"), [channels, keys])], [v, kk],
                                            name=b.name("split_kv"), axis=1))
            values[d] = v
            q = b.op("Einsum", [h[d], b.weight(b.name("wq"), [channels, keys])], "query", equation="nci,ck->nki")
            qd = b.op("Gather", [q, "edge_dst"], "gather_dst", axis=0)
            dot = b.op("ReduceSum", [b.op("Mul", [qd, kk], "qk"), b.const(b.name("axes"), [1, 2])], "dot", keepdims=0)
            logits = dot if logits is None else b.op("Add", [logits, dot], "logit_sum")
        e = b.op("Unsqueeze", [b.op("Exp", [logits], "edge_exp"), b.const(b.name("ax"), [1])], "unsqueeze")
        zeros = b.op("Mul", [b.op("ReduceSum", [h[0], b.const(b.name("ax"), [1])], "pool_like", keepdims=0),
                             b.weight(b.name("zero"), [1])], "zeros")
        total = b.op("ScatterND", [zeros, "edge_dst_index", e], "softmax_sum", reduction="add")
        alpha = b.op("Div", [e, b.op("Gather", [total, "edge_dst"], "gather_sum", axis=0)], "edge_softmax")
        alpha3 = b.op("Unsqueeze", [alpha, b.const(b.name("ax"), [2])], "unsqueeze")
        norms = []
        for d in range(degrees):
            attended = b.op("ScatterND", [h[d], "edge_dst_index", b.op("Mul", [values[d], alpha3], "attend")],
                            "aggregate", reduction="add")
            skip = b.op("Einsum", [h[d], b.weight(b.name("wskip"), [channels, channels])], "skip",
                        equation="nci,cd->ndi")
            h[d] = b.op("Add", [attended, skip], "residual")
            norms.append(b.op("ReduceL2", [h[d], b.const(b.name("ax"), [2])], "norm", keepdims=1))
        cat = b.op("Concat", norms, "norms", axis=1)
        scale = b.op("Relu", [b.op("LayerNormalization", [b.op("Reshape", [cat, shape([0, degrees * channels])],
                                                                  "reshape"),
                                                          b.weight(b.name("s"), [degrees * channels]),
                                                          b.weight(b.name("b"), [degrees * channels])], "ln", axis=-1)],
                      "relu")
        scale = b.op("Reshape", [scale, shape([0, degrees * channels, 1])], "reshape")
        pieces = [b.name("scale") for _ in range(degrees)]
        b.nodes.append(helper.make_node("Split", [scale, b.const(b.name("per_degree"), [channels] * degrees)], pieces,
                                        name=b.name("split_scale"), axis=1))
        for d in range(degrees):
            h[d] = b.op("Mul", [b.op("Div", [h[d], norms[d]], "unit"), pieces[d]], "rescale")
    pooled = b.op("ReduceMax", [b.op("Reshape", [h[0], shape([0, channels])], "reshape"),
                                b.const("node_axis", [0])], "max_pool", keepdims=1)
    energy = linear(b.op("Relu", [linear(pooled, channels, channels)], "relu"), channels, 1)
    model = b.model("se3-transformer", inputs, [helper.make_tensor_value_info(energy, f, [1, 1])])
    model.opset_import[0].version = 18
    return model


EXAMPLES = {"resnet50": resnet50, "bert-large": bert_large, "molecule-mpnn": molecule_mpnn,
            "se3-transformer": se3_transformer}
# Default batch shapes of the shipped examples (a sample: one image, one 128-token sequence with 20
# masked positions, one QM9-sized molecule with its fully connected edge list).
DEFAULT_BATCH_SHAPES = {"resnet50": {}, "bert-large": {"seq": 128, "masked": 20},
                        "molecule-mpnn": {"nodes": 18, "edges": 306}, "se3-transformer": {"nodes": 18, "edges": 38}}


def write_examples(directory: str | Path) -> list[Path]:
    """Write every example model into ``directory``; returns the paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, build in EXAMPLES.items():
        path = out / f"{name}.onnx"
        onnx.save_model(build(), str(path))
        paths.append(path)
    return paths


if __name__ == "__main__":  # pragma: no cover - developer script
    for written in write_examples(sys.argv[1] if len(sys.argv) > 1 else "src/windtunnel/catalog/models/onnx"):
        print(written)
