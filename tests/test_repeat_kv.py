"""Stacks whose model repeats KV heads before attention (stack kernels.repeat_kv; torchtitan's Llama until
Jan 2026): attention and context parallelism then move K and V at the query heads' count."""

from __future__ import annotations

import pytest

from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.specs.model import load_model
from windtunnel.specs.stack import load_stack


def _op(graph, name):
    return next(op for op in graph.ops if op.name == name)


def test_repeated_kv_heads_multiply_the_cp_gather_and_add_the_copy():
    model = load_model("llama3-405b")  # 128 query heads, 8 KV heads
    kwargs = dict(tp=8, sp=True, cp=4, seq_len=131072, context_parallel="allgather")
    native = layer_forward(model, Sharding(**kwargs), moe=False)
    repeated = layer_forward(model, Sharding(**kwargs, repeat_kv=True), moe=False)
    ratio = _op(repeated, "cp_kv_allgather").bytes_moved / _op(native, "cp_kv_allgather").bytes_moved
    assert ratio == pytest.approx(model.heads / model.kv_heads)
    assert "repeat_kv" in {op.name for op in repeated.ops} and "repeat_kv" not in {op.name for op in native.ops}


def test_no_copy_when_every_query_head_has_its_own_kv_head():
    model = load_model("llama3-405b").model_copy(update={"kv_heads": 128})
    graph = layer_forward(model, Sharding(tp=8, sp=True, repeat_kv=True, seq_len=8192), moe=False)
    assert "repeat_kv" not in {op.name for op in graph.ops}


def test_torchtitan_repeats_kv_and_megatron_does_not():
    assert load_stack("torchtitan").kernels.repeat_kv is True
    assert load_stack("torchtitan-compile").kernels.repeat_kv is True  # inherits torchtitan
    assert load_stack("megatron").kernels.repeat_kv is False
