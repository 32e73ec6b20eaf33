"""A PyTorch module as an operator DAG through torch.fx (``windtunnel.capture(..., method="fx")``).

``torch.fx.symbolic_trace`` gives the module's graph of ``call_module`` / ``call_function`` /
``call_method`` nodes; :class:`torch.fx.passes.shape_prop.ShapeProp` under a ``FakeTensorMode`` gives
every node's output shape and dtype without running a kernel or allocating a tensor (so a batch of
4096 images costs nothing to propagate). Each node is mapped to the ONNX operator the ONNX exporter
would emit for it (``nn.Linear`` -> MatMul with the transposed weight, ``nn.Conv2d`` -> Conv,
``nn.LayerNorm`` -> LayerNormalization, ``nn.Embedding`` -> Gather, ``torch.matmul`` -> MatMul,
``F.scaled_dot_product_attention`` -> MatMul, Softmax, MatMul, ``x.view`` -> Reshape, ...) and costed
by the ONNX importer's own rules (:func:`windtunnel.graph.onnx_import._cost`), so a module captured by
fx and the same module exported to ONNX give the same operator kinds, FLOPs and parameters. A node
with no mapping is listed as unsupported (``call_function torch.fft.fft at node 'fft'``) and
simulating the model is the importer's one clear error naming it.

Symbolic dimensions: ``dynamic={"input_0": {0: "batch"}}`` names input dimensions, bound by
``batch_shape`` as for an ONNX model (one free name is the micro-batch); without any, the example
inputs are one sample and a micro-batch of ``mbs`` costs ``mbs`` times it. Units: FLOPs, bytes.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from windtunnel.graph.graph_model import GraphModel
from windtunnel.graph.onnx_import import ACT_BYTES, CATEGORY_OF, ImportedGraph, Node, _cost, _scale
from windtunnel.specs.errors import WindtunnelError


@dataclass
class _Attr:
    name: str
    i: int = 0
    s: bytes = b""


@dataclass
class _Proto:
    """The fields of an ONNX NodeProto that the importer's cost rules read."""

    name: str
    op_type: str
    input: list[str]
    attribute: list[_Attr] = field(default_factory=list)


@dataclass
class _Weight:
    dims: list[int]


# nn.Module class name -> ONNX operator (the leaf modules symbolic_trace keeps as call_module).
MODULES = {
    "Linear": "MatMul", "Bilinear": None, "Conv1d": "Conv", "Conv2d": "Conv", "Conv3d": "Conv",
    "ConvTranspose1d": "ConvTranspose", "ConvTranspose2d": "ConvTranspose", "ConvTranspose3d": "ConvTranspose",
    "BatchNorm1d": "BatchNormalization", "BatchNorm2d": "BatchNormalization", "BatchNorm3d": "BatchNormalization",
    "LayerNorm": "LayerNormalization", "GroupNorm": "GroupNormalization", "RMSNorm": "RMSNormalization",
    "InstanceNorm1d": "InstanceNormalization", "InstanceNorm2d": "InstanceNormalization",
    "Embedding": "Gather", "EmbeddingBag": "Gather",
    "ReLU": "Relu", "ReLU6": "Clip", "GELU": "Gelu", "SiLU": "Sigmoid", "Sigmoid": "Sigmoid", "Tanh": "Tanh",
    "Softmax": "Softmax", "LogSoftmax": "LogSoftmax", "LeakyReLU": "LeakyRelu", "ELU": "Elu", "SELU": "Selu",
    "Hardswish": "HardSwish", "Hardsigmoid": "HardSigmoid", "Softplus": "Softplus", "Mish": "Mish",
    "PReLU": "PRelu", "Dropout": "Dropout", "Dropout1d": "Dropout", "Dropout2d": "Dropout", "Identity": "Identity",
    "Flatten": "Flatten", "Unflatten": "Reshape", "MaxPool1d": "MaxPool", "MaxPool2d": "MaxPool",
    "MaxPool3d": "MaxPool", "AvgPool1d": "AveragePool", "AvgPool2d": "AveragePool", "AvgPool3d": "AveragePool",
    "AdaptiveAvgPool1d": "GlobalAveragePool", "AdaptiveAvgPool2d": "GlobalAveragePool",
    "AdaptiveMaxPool2d": "GlobalMaxPool", "Upsample": "Resize", "CrossEntropyLoss": "SoftmaxCrossEntropyLoss",
    "NLLLoss": "NegativeLogLikelihoodLoss",
}
# torch / operator functions and Tensor methods (by name) -> ONNX operator.
FUNCTIONS = {
    "add": "Add", "iadd": "Add", "sub": "Sub", "isub": "Sub", "rsub": "Sub", "mul": "Mul", "imul": "Mul",
    "truediv": "Div", "div": "Div", "floordiv": "Div", "neg": "Neg", "pow": "Pow", "abs": "Abs", "mod": "Mod",
    "matmul": "MatMul", "mm": "MatMul", "bmm": "MatMul", "linear": "MatMul", "einsum": "Einsum",
    "relu": "Relu", "relu_": "Relu", "gelu": "Gelu", "silu": "Sigmoid", "sigmoid": "Sigmoid", "tanh": "Tanh",
    "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "rsqrt": "Sqrt", "reciprocal": "Reciprocal", "erf": "Erf",
    "softmax": "Softmax", "log_softmax": "LogSoftmax", "leaky_relu": "LeakyRelu", "elu": "Elu", "mish": "Mish",
    "hardswish": "HardSwish", "softplus": "Softplus", "clamp": "Clip", "clip": "Clip", "sin": "Sin", "cos": "Cos",
    "where": "Where", "masked_fill": "Where", "maximum": "Max", "minimum": "Min", "eq": "Equal", "lt": "Less",
    "gt": "Greater", "le": "LessOrEqual", "ge": "GreaterOrEqual", "logical_not": "Not",
    "dropout": "Dropout", "layer_norm": "LayerNormalization", "group_norm": "GroupNormalization",
    "batch_norm": "BatchNormalization", "rms_norm": "RMSNormalization", "normalize": "LpNormalization",
    "conv1d": "Conv", "conv2d": "Conv", "conv3d": "Conv", "embedding": "Gather",
    "index_select": "Gather", "gather": "GatherElements", "scatter": "ScatterElements",
    "scatter_add": "ScatterElements", "index_add": "ScatterElements", "scatter_reduce": "ScatterElements",
    "cat": "Concat", "concat": "Concat", "stack": "Concat", "pad": "Pad", "repeat": "Tile", "expand": "Expand",
    "interpolate": "Resize", "tril": "Trilu", "triu": "Trilu", "transpose": "Transpose", "permute": "Transpose",
    "t": "Transpose", "contiguous": "Transpose", "cumsum": "CumSum", "topk": "TopK", "argmax": "ArgMax",
    "mean": "ReduceMean", "sum": "ReduceSum", "amax": "ReduceMax", "max": "ReduceMax", "min": "ReduceMin",
    "prod": "ReduceProd", "norm": "ReduceL2", "logsumexp": "ReduceLogSumExp",
    "max_pool2d": "MaxPool", "max_pool1d": "MaxPool", "avg_pool2d": "AveragePool",
    "adaptive_avg_pool2d": "GlobalAveragePool", "adaptive_avg_pool1d": "GlobalAveragePool",
    "cross_entropy": "SoftmaxCrossEntropyLoss", "nll_loss": "NegativeLogLikelihoodLoss",
    "to": "Cast", "float": "Cast", "half": "Cast", "bfloat16": "Cast", "type": "Cast", "type_as": "Cast",
    "view": "Reshape", "reshape": "Reshape", "flatten": "Flatten", "unflatten": "Reshape", "squeeze": "Squeeze",
    "unsqueeze": "Unsqueeze", "view_as": "Reshape", "reshape_as": "Reshape", "getitem": "Slice", "split": "Split",
    "chunk": "Split", "unbind": "Split", "narrow": "Slice", "select": "Slice", "size": "Shape", "dim": "Shape",
    "getattr": "Shape", "detach": "Identity", "clone": "Identity", "expand_as": "Expand", "identity": "Identity",
    "scaled_dot_product_attention": "Attention",
}
# What the unsupported-operator error lists: nn modules (call_module), then functions and Tensor methods.
SUPPORTED_FX = tuple(sorted(f"nn.{k}" for k, v in MODULES.items() if v)) + tuple(sorted(FUNCTIONS))


def _torch_bytes(dtype) -> float:
    """Bytes of one element as the importer costs it: floating activations 16-bit, integers at their width."""
    return ACT_BYTES if dtype.is_floating_point else float(dtype.itemsize)


def _target_name(node) -> str:
    target = node.target
    if node.op == "call_method":
        return str(target)
    name = getattr(target, "__name__", str(target))
    return name[:-1] if name.endswith("_") and not name.startswith("_") else name  # in-place variants


def _describe(node) -> str:
    if node.op == "call_module":
        return f"call_module {type(node.graph.owning_module.get_submodule(node.target)).__name__}"
    if node.op == "call_function":
        module = getattr(node.target, "__module__", None) or ""
        return f"call_function {module + '.' if module else ''}{_target_name(node)}"
    return f"call_method Tensor.{node.target}"


class FxGraphModel(GraphModel):
    """A torch module traced by torch.fx as a whole-model operator DAG (see the module doc)."""

    def __init__(self, module: Any, example_inputs: Any, *, dynamic: dict[str, dict[int, str]] | None = None,
                 batch_shape: dict[str, int] | None = None, annotations: dict[str, str] | None = None,
                 strict: bool = True, traced: Any = None) -> None:
        self.module = module
        self.inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
        self.name = type(module).__name__
        self.path = f"torch.fx:{self.name}"
        self.proto = None
        self.traced = traced if traced is not None else trace_module(module)
        placeholders = [n for n in self.traced.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(self.inputs):
            raise WindtunnelError(f"{self.name} takes {len(placeholders)} inputs; {len(self.inputs)} example inputs "
                                  "were given.", field="example_inputs")
        self.input_names = [f"input_{i}" for i in range(len(self.inputs))]
        self.dynamic = {k: dict(v) for k, v in (dynamic or {}).items()}
        bad = [k for k in self.dynamic if k not in self.input_names]
        if bad:
            raise WindtunnelError(f"dynamic names input '{bad[0]}'; the inputs are {', '.join(self.input_names)}.",
                                  field="dynamic")
        self.dims = list(dict.fromkeys(name for axes in self.dynamic.values() for name in axes.values()))
        self.batch_shape = dict(batch_shape or {})
        self.annotations = dict(annotations or {})
        self._bound: dict[int, ImportedGraph] = {}
        first = self.imported(1)
        if strict and first.unsupported:
            raise self.unsupported_error(first.unsupported, source=f"Captured module {self.name} (torch.fx)",
                                         supported=SUPPORTED_FX, label="torch.fx operators",
                                         hint="(or capture with method='onnx')")

    def imported(self, micro_batch: int) -> ImportedGraph:
        """The nodes for one micro-batch of ``micro_batch`` samples (cached)."""
        if micro_batch not in self._bound:
            self._bound[micro_batch] = self._import(micro_batch)
        return self._bound[micro_batch]

    def _bindings(self, micro_batch: int) -> tuple[dict[str, int], int]:
        unknown = [name for name in self.batch_shape if name not in self.dims]
        if unknown:
            raise WindtunnelError(f"batch_shape names {', '.join(unknown)}, which the capture's dynamic dimensions do "
                                  f"not have; they are: {', '.join(self.dims) or 'none'}.", field="batch_shape")
        free = [name for name in self.dims if name not in self.batch_shape]
        if len(free) > 1:
            raise WindtunnelError(f"dynamic dimensions {', '.join(free)} are unbound; bind all but one (the batch) "
                                  "with batch_shape.", field="batch_shape")
        bindings = dict(self.batch_shape)
        if free:
            bindings[free[0]] = micro_batch
            return bindings, 1
        return bindings, micro_batch

    def _propagate(self, bindings: dict[str, int]):
        """Shapes of every node for the bound dimensions, on fake tensors (no kernel runs)."""
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.passes.shape_prop import ShapeProp

        mode = FakeTensorMode(allow_non_fake_inputs=True)
        args = []
        for name, tensor in zip(self.input_names, self.inputs, strict=True):
            axes = self.dynamic.get(name, {})
            if not isinstance(tensor, torch.Tensor) or not axes:
                args.append(tensor)
                continue
            shape = [bindings.get(axes.get(i), d) if i in axes else d for i, d in enumerate(tensor.shape)]
            with mode:
                args.append(torch.zeros(shape, dtype=tensor.dtype))
        quiet = logging.getLogger("torch._subclasses.fake_tensor")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)  # it logs the failing meta kernel's traceback; the error below says it
        try:
            with contextlib.redirect_stderr(io.StringIO()):  # ShapeProp prints the traceback before it raises
                ShapeProp(self.traced, fake_mode=mode).propagate(*args)
        except Exception as exc:
            cause = exc.__cause__ or exc
            node = str(exc).split(" with meta=")[0] if exc is not cause else ""
            raise WindtunnelError(f"Shape propagation of {self.name} failed on the example inputs: "
                                  f"{type(cause).__name__}: {str(cause).splitlines()[0][:200] if str(cause) else ''}"
                                  f"{f' ({node[:200]})' if node else ''}.", field="example_inputs") from None
        finally:
            quiet.setLevel(level)

    def _import(self, micro_batch: int) -> ImportedGraph:
        import torch

        bindings, scale = self._bindings(micro_batch)
        self._propagate(bindings)
        shapes: dict[str, tuple[list[int], float]] = {}
        init: dict[str, _Weight] = {}
        tuples: dict[str, int] = {}
        for n in self.traced.graph.nodes:
            meta = n.meta.get("tensor_meta")
            if meta is None:
                continue
            if hasattr(meta, "shape"):  # a TensorMetadata (itself a named tuple)
                shapes[n.name] = (list(meta.shape), _torch_bytes(meta.dtype))
            elif isinstance(meta, (tuple, list)):
                tuples[n.name] = len(meta)
                for i, m in enumerate(meta):
                    if hasattr(m, "shape"):
                        shapes[f"{n.name}.{i}"] = (list(m.shape), _torch_bytes(m.dtype))
        where = self.path

        def dims_of(tensor: str, node) -> list[int]:
            if tensor not in shapes:
                raise WindtunnelError(f"{where}: tensor '{tensor}' of node '{node.name}' ({node.op_type}) has no "
                                      "shape from shape propagation.", field="model")
            return shapes[tensor][0]

        def nbytes(tensor: str, node) -> float:
            return math.prod(dims_of(tensor, node)) * shapes[tensor][1]

        def weight(name: str, dims) -> str:
            init[name] = _Weight([int(d) for d in dims])
            shapes.setdefault(name, ([int(d) for d in dims], ACT_BYTES))
            return name

        graph_inputs = [n.name for n in self.traced.graph.nodes if n.op == "placeholder"]
        outputs: list[str] = []
        nodes: list[Node] = []
        unsupported: list[str] = []
        for n in self.traced.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "get_attr":
                value = _attr(self.traced, n.target)
                if isinstance(value, torch.Tensor):
                    weight(n.name, value.shape)
                continue
            if n.op == "output":
                outputs = [a.name for a in _tensor_args(n.args) if a.name in shapes]
                continue
            mapped = _map(self.traced, n, weight, shapes, init, tuples)
            if mapped is None:
                unsupported.append(f"{_describe(n)} at node '{n.name}'")
                continue
            for proto, outs in mapped:
                inputs = [t for t in proto.input if t and t not in init]
                category = CATEGORY_OF.get(proto.op_type)
                if category == "view" or not inputs or not all(t in shapes for t in outs):
                    if not inputs and outs and outs[0] in shapes:  # arithmetic on weights: a constant
                        init[outs[0]] = _Weight(shapes[outs[0]][0])
                    nodes.append(Node(proto.name, proto.op_type, "view", "view", inputs, outs))
                    continue
                nodes.append(_cost(where, proto, proto.name, category, inputs, outs, init, dims_of, nbytes,
                                   graph_inputs))
        if scale > 1:
            for node in nodes:
                _scale(node, scale)
        tensor_bytes = {t: math.prod(shapes[t][0]) * shapes[t][1] * scale for node in nodes for t in node.outputs
                        if t in shapes}
        state = list(self.module.named_parameters()) + list(self.module.named_buffers())
        parameters = sum(t.numel() for _, t in state if t.is_floating_point())
        parameter_bytes = sum(t.numel() * t.element_size() for _, t in state)
        return ImportedGraph(self.name, nodes, float(parameters), float(parameter_bytes), unsupported, bindings,
                             graph_inputs, outputs, tensor_bytes, scale)


def trace_module(module: Any):
    """``torch.fx.symbolic_trace(module)``, or one clear error saying why it cannot be traced."""
    import torch.fx

    try:
        return torch.fx.symbolic_trace(module)
    except Exception as exc:  # fx raises TraceError, TypeError, NotImplementedError, ...
        text = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise WindtunnelError(f"torch.fx could not trace {type(module).__name__} ({type(exc).__name__}: {text}); "
                              "data-dependent control flow cannot be traced symbolically: try "
                              "windtunnel.capture(..., method='onnx').", field="model") from None


def _attr(root, target: str):
    value = root
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _tensor_args(args) -> list:
    """The fx Nodes among (nested) arguments, in order."""
    import torch.fx

    found: list = []
    torch.fx.node.map_arg(args, lambda a: found.append(a))
    return [a for a in found if isinstance(a, torch.fx.Node)]


def _map(root, n, weight, shapes, init, tuples) -> list[tuple[_Proto, list[str]]] | None:
    """The ONNX-style nodes of one fx node (None if it has no mapping)."""
    args = [a.name for a in _tensor_args((n.args, n.kwargs))]
    out = [n.name]
    if n.op == "call_module":
        sub = root.get_submodule(n.target)
        kind = type(sub).__name__
        op = MODULES.get(kind)
        if op is None:
            return None
        x = args[0] if args else ""
        if op == "MatMul":
            w = weight(f"{n.target}.weight^T", list(sub.weight.shape)[::-1])
            extra = [weight(f"{n.target}.bias", sub.bias.shape)] if sub.bias is not None else []
            return [(_Proto(n.name, "MatMul", [x, w, *extra]), out)]
        if op in ("Conv", "ConvTranspose"):
            w = weight(f"{n.target}.weight", sub.weight.shape)
            extra = [weight(f"{n.target}.bias", sub.bias.shape)] if sub.bias is not None else []
            return [(_Proto(n.name, op, [x, w, *extra], [_Attr("group", int(sub.groups))]), out)]
        if op == "Gather":
            return [(_Proto(n.name, op, [weight(f"{n.target}.weight", sub.weight.shape), *args]), out)]
        if op == "Dropout" and not sub.training:
            op = "Identity"  # eval dropout is the identity (as the ONNX exporter drops it)
        state = [weight(f"{n.target}.{k}", t.shape) for k, t in list(sub.named_parameters(recurse=False))
                 + list(sub.named_buffers(recurse=False)) if t is not None and t.is_floating_point()]
        return [(_Proto(n.name, op, [*args, *state]), out)]
    name = _target_name(n)
    op = FUNCTIONS.get(name)
    if op is None:
        return None
    if name == "getitem" and args and args[0] in tuples:
        index = n.args[1] if isinstance(n.args[1], int) else 0
        return [(_Proto(n.name, "Identity", [f"{args[0]}.{index}"]), out)]
    if n.name in tuples:  # split / chunk / unbind / topk: outputs are the tuple's members
        out = [f"{n.name}.{i}" for i in range(tuples[n.name])]
    if name == "linear":
        w = args[1] if len(args) > 1 else ""
        if w in init:
            w = weight(f"{w}^T", init[w].dims[::-1])
        return [(_Proto(n.name, "MatMul", [args[0], w, *args[2:]]), out)]
    if op in ("Conv", "Gather") and name != "index_select":
        if op == "Gather":  # F.embedding(indices, weight)
            args = args[::-1]
        group = n.kwargs.get("groups", n.args[6] if len(n.args) > 6 else 1)
        return [(_Proto(n.name, op, args, [_Attr("group", int(group))]), out)]
    if op == "Einsum":
        equation = n.args[0] if isinstance(n.args[0], str) else ""
        return [(_Proto(n.name, op, args, [_Attr("equation", s=equation.encode())]), out)]
    if op == "Dropout" and not (n.kwargs.get("training", n.args[2] if len(n.args) > 2 else True)):
        op = "Identity"
    if op == "Attention":
        return _attention(n, args, shapes)
    return [(_Proto(n.name, op, args), out)]


def _attention(n, args, shapes) -> list[tuple[_Proto, list[str]]]:
    """F.scaled_dot_product_attention(q, k, v) as the exporter writes it: scores = q @ k^T, a softmax,
    probabilities @ v (the mask, if any, an input of the softmax)."""
    q, k, v = args[:3]
    dq, dk = shapes[q][0], shapes[k][0]
    k_t, scores, probs = f"{n.name}.k_t", f"{n.name}.scores", f"{n.name}.probs"
    shapes[k_t] = ([*dk[:-2], dk[-1], dk[-2]], shapes[k][1])
    shapes[scores] = ([*dq[:-1], dk[-2]], shapes[q][1])
    shapes[probs] = shapes[scores]
    return [(_Proto(f"{n.name}.transpose", "Transpose", [k]), [k_t]),
            (_Proto(f"{n.name}.qk", "MatMul", [q, k_t]), [scores]),
            (_Proto(f"{n.name}.softmax", "Softmax", [scores, *args[3:]]), [probs]),
            (_Proto(f"{n.name}.pv", "MatMul", [probs, v]), [n.name])]

