"""Import an ONNX model as data: shapes from ONNX shape inference, operators mapped to cost kinds.

The file is read with the ``onnx`` package (``load_external_data=False``: weights are not needed,
only their shapes; no operator is ever executed). Symbolic dimensions are bound by a batch shape
(``--batch-shape nodes=2048,edges=16384``): named dimensions take the given values; one remaining
symbolic dimension (the batch) takes the micro-batch size; if none remains, one micro-batch of
``mbs`` samples costs ``mbs`` times one sample (its operators are scaled, as samples concatenated the
way graph batches are). Each node becomes one :class:`Node` with FLOPs, bytes moved and bytes saved
for the backward, per micro-batch, in the kinds of :mod:`windtunnel.graph.ops` / :mod:`cost.kinds`.
Activations are costed 16-bit (mixed-precision training, ``ACT_BYTES``), integer tensors at their
width; parameters are the float initializers.

Units: FLOPs, bytes, elements.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from windtunnel.specs.errors import WindtunnelError

ACT_BYTES = 2.0

# ONNX operator -> category; the category fixes the cost kind and the tensor-parallel rule.
CATEGORIES: dict[str, tuple[str, ...]] = {
    "matmul": ("MatMul", "Gemm"),
    "conv": ("Conv", "ConvTranspose"),
    "einsum": ("Einsum",),
    "norm": ("BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
             "RMSNormalization", "LpNormalization"),
    "pointwise": ("Relu", "Sigmoid", "Tanh", "Gelu", "Erf", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt",
                  "Reciprocal", "Exp", "Log", "Clip", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid",
                  "HardSwish", "Softplus", "Softsign", "Neg", "Abs", "Where", "Cast", "Dropout", "Softmax",
                  "LogSoftmax", "Mish", "PRelu", "Max", "Min", "Sum", "Mean", "Equal", "Less", "Greater",
                  "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "Sin", "Cos", "Floor", "Ceil",
                  "Round", "Sign", "IsNaN", "IsInf", "ThresholdedRelu", "Shrink", "BitShift", "Mod"),
    "reduce": ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
               "ReduceSumSquare", "ReduceLogSumExp", "GlobalAveragePool", "GlobalMaxPool", "AveragePool",
               "MaxPool", "LpPool", "ArgMax", "ArgMin", "CumSum", "TopK"),
    "move": ("Transpose", "Concat", "Pad", "Tile", "Expand", "Resize", "Upsample", "DepthToSpace", "SpaceToDepth",
             "Trilu"),
    # Views: no device work (frameworks run split/slice/reshape as views of the same storage).
    "view": ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Shape", "Size", "Constant", "ConstantOfShape",
             "Identity", "Range", "EyeLike", "Split", "Slice"),
    "gather": ("Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND", "Scatter", "OneHot"),
    "loss": ("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"),
}
CATEGORY_OF = {op: category for category, ops in CATEGORIES.items() for op in ops}
SUPPORTED = tuple(sorted(CATEGORY_OF))
# Nonlinear pointwise operators keep their output (or input) for the backward; linear ones nothing.
_KEEPS_NOTHING = {"Add", "Sub", "Cast", "Where", "Identity", "Neg", "Equal", "Less", "Greater", "LessOrEqual",
                  "GreaterOrEqual", "Not", "And", "Or", "Xor", "Floor", "Ceil", "Round", "Sign", "IsNaN", "IsInf",
                  "Sum", "Mean", "BitShift", "Mod"}
# Operators whose result needs the whole feature dimension (tensor parallelism gathers a split input).
NEEDS_FULL = {"LayerNormalization", "GroupNormalization", "RMSNormalization", "LpNormalization",
              "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceSumSquare", "ReduceLogSumExp", "ArgMax", "ArgMin", "TopK", "CumSum", "Concat",
              "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "Gather", "GatherElements", "GatherND",
              "ScatterElements", "ScatterND", "Scatter", "OneHot"}


@dataclass
class Node:
    """One costed ONNX node for one micro-batch (FLOPs, bytes; ``shape`` (m, n, k) for GEMM-like kinds).

    kind: gemm | conv | memory | gather | view (no cost). ``weighted``: a GEMM/convolution with a
    weight initializer (tensor parallelism splits it by column or row). ``params``: parameter elements.
    ``inputs``/``outputs``: activation tensor names; ``input_bytes``: bytes of each activation input.
    """

    name: str
    op_type: str
    category: str
    kind: str
    inputs: list[str]
    outputs: list[str]
    flops: float = 0.0
    bytes: float = 0.0
    saved: float = 0.0
    out_bytes: float = 0.0
    input_bytes: list[float] = field(default_factory=list)
    shape: tuple[int, ...] | None = None
    count: int = 1
    params: float = 0.0
    weighted: bool = False
    reads_model_input: bool = False


@dataclass
class ImportedGraph:
    """An ONNX model's nodes at one binding of its symbolic dimensions."""

    name: str
    nodes: list[Node]
    parameters: float
    parameter_bytes: float
    unsupported: list[str]
    bindings: dict[str, int]
    graph_inputs: list[str]
    graph_outputs: list[str]
    tensor_bytes: dict[str, float]
    scale: int = 1

    @property
    def forward_flops(self) -> float:
        """Model FLOPs of one forward over the bound shapes (matmul, convolution, einsum), FLOPs."""
        return sum(n.flops for n in self.nodes if n.kind in ("gemm", "conv"))


def _fail(path: str, message: str, field_name: str | None = None) -> None:
    raise WindtunnelError(f"ONNX model '{path}': {message}", field=field_name)


def load_onnx(path: str | Path):
    """Read an ONNX file as data (weights' bytes are not loaded); a clear error if it is not one."""
    import onnx

    p = Path(path)
    if not p.is_file():
        _fail(str(path), "no such file.", "model")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as exc:  # protobuf decode errors have many types
        _fail(str(path), f"not a readable ONNX file ({type(exc).__name__}: {str(exc)[:120]}); give an .onnx file "
              "written by torch.onnx.export, onnx.save or a model zoo.", "model")
    if not model.graph.node:
        _fail(str(path), "the graph has no nodes.", "model")
    return model


def symbolic_dims(model) -> list[str]:
    """Names of the symbolic dimensions of the model's graph inputs, in order of appearance."""
    initializers = {t.name for t in model.graph.initializer}
    names: list[str] = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param not in names:
                names.append(dim.dim_param)
    return names


def import_onnx(path: str | Path, batch_shape: dict[str, int] | None = None, micro_batch: int = 1,
                model=None) -> ImportedGraph:
    """Import ``path`` with its symbolic dimensions bound (see the module doc); costs per micro-batch."""
    import onnx
    from onnx import shape_inference

    where = str(path)
    model = load_onnx(path) if model is None else model
    batch_shape = dict(batch_shape or {})
    dims = symbolic_dims(model)
    unknown = [name for name in batch_shape if name not in dims]
    if unknown:
        _fail(where, f"--batch-shape names {', '.join(unknown)}, which the model's inputs do not have; its symbolic "
              f"dimensions: {', '.join(dims) or 'none (every input shape is fixed)'}.", "batch_shape")
    free = [name for name in dims if name not in batch_shape]
    if len(free) > 1:
        _fail(where, f"symbolic dimensions {', '.join(free)} are unbound; one of them may stay free as the batch "
              f"(the micro-batch), bind the others with --batch-shape NAME=VALUE,... (e.g. --batch-shape "
              f"{','.join(f'{name}=128' for name in free[1:])}).", "batch_shape")
    bindings = dict(batch_shape)
    scale = micro_batch
    if free:
        bindings[free[0]] = micro_batch
        scale = 1
    bound = onnx.ModelProto()
    bound.CopyFrom(model)
    for value in bound.graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in bindings:
                dim.dim_value = int(bindings[dim.dim_param])
    try:
        inferred = shape_inference.infer_shapes(bound, strict_mode=True, data_prop=True)
    except Exception as exc:
        _fail(where, f"ONNX shape inference failed ({str(exc).splitlines()[0][:200]}); check the model with "
              "onnx.checker.check_model and the bound dimensions.", "model")
    return _nodes(where, inferred, bindings, scale)


def _elem_bytes(elem_type: int) -> float:
    import onnx

    if elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                     onnx.TensorProto.DOUBLE):
        return ACT_BYTES
    if elem_type in (onnx.TensorProto.INT64, onnx.TensorProto.UINT64):
        return 8.0
    if elem_type in (onnx.TensorProto.INT32, onnx.TensorProto.UINT32):
        return 4.0
    return 1.0


def _nodes(where: str, model, bindings: dict[str, int], scale: int) -> ImportedGraph:
    import onnx

    graph = model.graph
    init = {t.name: t for t in graph.initializer}
    shapes: dict[str, tuple[list, int]] = {}
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
        shapes[value.name] = (dims, tensor.elem_type)
    for name, tensor in init.items():
        shapes[name] = (list(tensor.dims), tensor.data_type)
    consts = set(init)
    graph_inputs = [v.name for v in graph.input if v.name not in init]
    unsupported: list[str] = []
    nodes: list[Node] = []
    parameters = sum(math.prod(t.dims) for t in init.values() if t.data_type == onnx.TensorProto.FLOAT
                     or t.data_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16))
    parameter_bytes = sum(math.prod(t.dims) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
                          for t in init.values())

    def dims_of(tensor: str, node) -> list[int]:
        if tensor not in shapes:
            _fail(where, f"tensor '{tensor}' (an input or output of node '{node.name}', {node.op_type}) has no "
                  "inferred shape; export the model with static shapes or bind its dimensions with --batch-shape.",
                  "batch_shape")
        dims = shapes[tensor][0]
        bad = [d for d in dims if not isinstance(d, int) or d <= 0]
        if bad:
            _fail(where, f"tensor '{tensor}' of node '{node.name}' ({node.op_type}) has unbound dimension "
                  f"'{bad[0]}'; bind it with --batch-shape {bad[0]}=VALUE.", "batch_shape")
        return dims

    def nbytes(tensor: str, node) -> float:
        return math.prod(dims_of(tensor, node)) * _elem_bytes(shapes[tensor][1])

    for position, node in enumerate(graph.node):
        name = node.name or f"{node.op_type}_{position}"
        category = CATEGORY_OF.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if category is None:
            domain = f" (domain '{node.domain}')" if node.domain not in ("", "ai.onnx") else ""
            unsupported.append(f"{node.op_type}{domain} at node '{name}'")
            continue
        inputs = [t for t in node.input if t and t not in consts]
        outputs = [t for t in node.output if t]
        if category == "view" or not inputs:
            if not inputs:
                consts.update(outputs)  # shape arithmetic on constants: no device work
            nodes.append(Node(name, node.op_type, "view", "view", inputs, outputs))
            continue
        nodes.append(_cost(where, node, name, category, inputs, outputs, init, dims_of, nbytes, graph_inputs))
    if scale > 1:
        for n in nodes:
            _scale(n, scale)
    tensor_bytes = {}
    for n in nodes:
        for t in n.outputs:
            if t in shapes and all(isinstance(d, int) and d > 0 for d in shapes[t][0]):
                tensor_bytes[t] = math.prod(shapes[t][0]) * _elem_bytes(shapes[t][1]) * scale
    return ImportedGraph(graph.name or Path(where).stem, nodes, float(parameters), float(parameter_bytes), unsupported,
                         bindings, graph_inputs, [v.name for v in graph.output], tensor_bytes, scale)


def _scale(node: Node, scale: int) -> None:
    """``scale`` samples of a per-sample node: the token-like GEMM dimension and every byte count grow."""
    node.flops *= scale
    node.bytes *= scale
    node.saved *= scale
    node.out_bytes *= scale
    node.input_bytes = [b * scale for b in node.input_bytes]
    if node.shape is not None:
        m, n, k = node.shape
        if node.weighted:
            node.shape = (m * scale, n, k)
        else:
            node.count *= scale


def _cost(where, node, name, category, inputs, outputs, init, dims_of, nbytes, graph_inputs) -> Node:
    """The costed Node of one supported ONNX node."""
    out_bytes = sum(nbytes(t, node) for t in outputs)
    in_bytes = [nbytes(t, node) for t in inputs]
    weights = [t for t in node.input if t in init]
    params = float(sum(math.prod(init[t].dims) for t in weights))
    base = dict(inputs=inputs, outputs=outputs, out_bytes=out_bytes, input_bytes=in_bytes, params=params)
    op = node.op_type
    if category == "matmul":
        a, b = node.input[0], node.input[1]
        da, db = dims_of(a, node), dims_of(b, node)
        if op == "Gemm":
            attrs = {x.name: x.i for x in node.attribute}
            m, k = (da[1], da[0]) if attrs.get("transA") else (da[0], da[1])
            n = db[0] if attrs.get("transB") else db[1]
            batch = 1
        else:
            da = [1] + da if len(da) == 1 else da
            db = db + [1] if len(db) == 1 else db
            m, k, n = da[-2], da[-1], db[-1]
            batch_a, batch_b = da[:-2], db[:-2]
            if b in init:  # activations (..., m, k) @ weight (k, n): the leading dims are rows
                m, batch = m * math.prod(batch_a), 1
            else:
                width = max(len(batch_a), len(batch_b))
                pa, pb = [1] * (width - len(batch_a)) + batch_a, [1] * (width - len(batch_b)) + batch_b
                batch = math.prod(max(x, y) for x, y in zip(pa, pb, strict=True))
        weighted = b in init or a in init
        flops = 2.0 * batch * m * n * k
        moved = sum(in_bytes) + ACT_BYTES * params + out_bytes
        saved = sum(in_bytes)
        return Node(name, op, category, "gemm", flops=flops, bytes=moved, saved=saved, shape=(m, n, k), count=batch,
                    weighted=weighted, **base)
    if category == "conv":
        x, w = node.input[0], node.input[1]
        dx, dw, dy = dims_of(x, node), dims_of(w, node), dims_of(outputs[0], node)
        groups = next((a.i for a in node.attribute if a.name == "group"), 1) or 1
        kernel = math.prod(dw[2:])
        if op == "Conv":
            m, n, k = dx[0] * math.prod(dy[2:]), dw[0] // groups, dw[1] * kernel
        else:  # ConvTranspose: weight (C_in, C_out/groups, k...): a GEMM per input pixel
            m, n, k = dx[0] * math.prod(dx[2:]), dw[1] * kernel, dw[0] // groups
        flops = 2.0 * m * n * k * groups
        moved = sum(in_bytes) + ACT_BYTES * params + out_bytes
        return Node(name, op, category, "conv", flops=flops, bytes=moved, saved=sum(in_bytes), shape=(m, n, k),
                    count=groups, weighted=w in init, reads_model_input=x in graph_inputs, **base)
    if category == "einsum":
        return _einsum(where, node, name, inputs, init, dims_of, base, in_bytes, out_bytes, params)
    if category == "gather":
        indices = in_bytes[1] if len(in_bytes) > 1 else 0.0
        # A scatter copies its data and read-modify-writes the updated rows; a gather reads and writes its rows.
        moved = 2.0 * sum(in_bytes) + out_bytes if op.startswith("Scatter") else 2.0 * out_bytes + indices
        return Node(name, op, category, "gather", bytes=moved, saved=indices, **base)
    moved = sum(in_bytes) + out_bytes
    saved = 0.0
    if category == "norm":
        moved += in_bytes[0]  # a statistics pass, then the normalising pass
        saved = in_bytes[0]
    elif category == "pointwise" and op not in _KEEPS_NOTHING:
        saved = out_bytes if len(inputs) == 1 else sum(in_bytes)
    elif op == "MaxPool":
        saved = in_bytes[0]
    elements = out_bytes / ACT_BYTES
    return Node(name, op, category, "memory", flops=elements, bytes=moved, saved=saved, **base)


def _einsum(where, node, name, inputs, init, dims_of, base, in_bytes, out_bytes, params) -> Node:
    """An Einsum as a batched GEMM: batch = indices in both operands and the output, m / n = indices of
    one operand only, k = contracted indices. One operand (a transpose or a reduction) is memory-bound."""
    equation = next((a.s.decode() for a in node.attribute if a.name == "equation"), "")
    operands = [t for t in node.input if t]
    if len(operands) != 2 or "->" not in equation or "..." in equation:
        if len(operands) == 1:
            return Node(name, "Einsum", "einsum", "memory", bytes=sum(in_bytes) + out_bytes, **base)
        _fail(where, f"Einsum node '{name}' has equation '{equation}'; supported: two operands with an explicit "
              "output and no ellipsis (e.g. 'bij,bjk->bik').", "model")
    lhs, out = equation.replace(" ", "").split("->")
    sa, sb = lhs.split(",")
    size: dict[str, int] = {}
    for letters, tensor in ((sa, operands[0]), (sb, operands[1])):
        for letter, extent in zip(letters, dims_of(tensor, node), strict=False):
            size[letter] = max(size.get(letter, 1), extent)
    batch = math.prod(size[c] for c in set(sa) & set(sb) & set(out))
    m = math.prod(size[c] for c in set(sa) - set(sb))
    n = math.prod(size[c] for c in set(sb) - set(sa))
    k = math.prod(size[c] for c in (set(sa) & set(sb)) - set(out))
    flops = 2.0 * batch * m * n * k
    weighted = any(t in init for t in operands)
    if weighted:
        m, batch = m * batch, 1
    moved = sum(in_bytes) + ACT_BYTES * params + out_bytes
    return Node(name, "Einsum", "einsum", "gemm", flops=flops, bytes=moved, saved=sum(in_bytes), shape=(m, n, k),
                count=batch, weighted=weighted, **base)


def parse_batch_shape(text: str | None) -> dict[str, int]:
    """``nodes=2048,edges=16384`` -> {'nodes': 2048, 'edges': 16384}; a clear error on bad items."""
    out: dict[str, int] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        match = re.fullmatch(r"([A-Za-z_][\w.\-]*)=(\d+)", item)
        if not match or int(match.group(2)) < 1:
            raise WindtunnelError(f"Field 'batch_shape' item '{item}' is not NAME=VALUE with a positive integer "
                                  "VALUE (e.g. --batch-shape nodes=2048,edges=16384).", field="batch_shape")
        out[match.group(1)] = int(match.group(2))
    return out
