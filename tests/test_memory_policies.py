"""Memory mechanisms per stack and schedule (train/memory.py): torchtitan's op-level selective
activation checkpointing, the compiled and the TP-parallel loss, interleaved 1F1B peaks counted per
model chunk, a tensor two GEMMs save kept once; and the published peak-memory report's accuracy.
Bytes throughout; GiB = 2**30 bytes."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from conftest import small_dense
from windtunnel.graph.ops import Op, OpGraph
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.plan import parse_plan
from windtunnel.specs.stack import load_stack
from windtunnel.train.memory import interleaved_peak, layer_saved_bytes, shared_input_bytes
from windtunnel.train.step import TrainingJob, _StepBuilder, simulate
from windtunnel.validation.training import read_rows, validate_rows

REPORT = Path(__file__).resolve().parents[1] / "validation" / "memory_runs.csv"
SEQ, MBS = 2048, 2


def _job(framework, plan: str = f"tp=1,pp=1,dp=8,mbs={MBS},recompute=selective,zero=3", model=None) -> TrainingJob:
    return TrainingJob(model=model or small_dense(), cluster=load_hardware("h100-sxm", 8), plan=parse_plan(plan),
                       seq_len=SEQ, global_batch=8 * MBS, framework=framework)


def _saved(framework, mode: str) -> float:
    return layer_saved_bytes(_StepBuilder(_job(framework, f"tp=1,pp=1,dp=8,mbs={MBS},recompute={mode},zero=3")),
                             "dense", mode)


def test_op_level_sac_keeps_every_second_matmul_output_the_attention_output_and_the_block_input():
    """torchtitan's policy per block (bf16, per token): its input; of the matmuls wq, wk, wv, wo, w1,
    w3, w2 the 1st, 3rd, 5th and 7th outputs; SDPA's output and fp32 log-sum-exp."""
    m = small_dense()
    head_dim = m.hidden // m.heads
    per_token = 2 * (m.hidden + m.heads * head_dim + m.kv_heads * head_dim + m.ffn_hidden + m.hidden) \
        + 2 * m.heads * head_dim + 4 * m.heads
    assert _saved("torchtitan", "selective") == pytest.approx(per_token * SEQ * MBS, rel=1e-9)


def test_op_level_sac_lies_between_no_recompute_and_full_recompute():
    none, op, full = (_saved("torchtitan", mode) for mode in ("none", "selective", "full"))
    assert full < op < 0.6 * none
    # Megatron-style selective (core attention only) keeps nearly everything with flash attention.
    assert _saved("pytorch-fsdp2", "selective") > 1.5 * op


def test_op_level_sac_lowers_the_peak_by_what_it_drops():
    titan = simulate(_job("torchtitan"))
    fsdp2 = simulate(_job("pytorch-fsdp2"))  # torchtitan's parent: the same but for the policy
    dropped = (_saved("pytorch-fsdp2", "selective") - _saved("torchtitan", "selective")) * small_dense().layers
    # Saved bytes fall by what the policy drops; the recomputed layer's transient rises by at most as much.
    assert 0.0 < fsdp2.peak_memory_bytes - titan.peak_memory_bytes <= dropped * 1.05 + 1.0


def test_tp_loss_parallel_workspace_is_per_vocab_shard_logit():
    """With TP, torchtitan's loss_parallel backward holds 12 bytes per logit (vocab-sharded) beside
    the saved log-probabilities; without the TP figure the eager 8 would apply."""
    model = small_dense().model_copy(update={"vocab": 131072})
    plan = f"tp=2,pp=1,dp=4,mbs={MBS},recompute=full,zero=3,sp=true"
    stack = load_stack("torchtitan")
    plain = stack.model_copy(update={"memory": stack.memory.model_copy(update={"tp_loss_workspace_bytes_per_logit": None})})
    with_tp = simulate(_job(stack, plan, model)).memory_breakdown["activations"]
    without = simulate(_job(plain, plan, model)).memory_breakdown["activations"]
    logits = SEQ * MBS * model.vocab / 2
    assert with_tp - without == pytest.approx((12.0 - 8.0) * logits * (1 + stack.memory.fragmentation), rel=1e-6)


def test_compiled_loss_keeps_bf16_logits_and_a_bf16_gradient():
    model = small_dense().model_copy(update={"vocab": 131072})
    plan = f"tp=1,pp=1,dp=8,mbs={MBS},recompute=full,zero=3"
    eager = simulate(_job("torchtitan", plan, model)).peak_memory_bytes
    compiled = simulate(_job("torchtitan-compile", plan, model)).peak_memory_bytes
    logits = SEQ * MBS * model.vocab
    # Eager: 4 saved + 8 workspace bytes per logit; compiled: 2 + 2 (the fused-loss graph keeps 2).
    assert eager - compiled == pytest.approx((12.0 - 4.0) * logits * 1.05, rel=0.02)


def test_interleaved_peak_counts_each_chunk_in_schedule_order():
    # Equal chunks: the warm-up forwards plus one, whatever chunk they run on.
    pp, vpp, mbs = 4, 2, 8
    warmup = (pp - 0 - 1) * 2 + (vpp - 1) * pp
    assert interleaved_peak([1.0] * vpp, pp, 0, mbs) == warmup + 1
    # Rank 0, chunk 0 light (embedding + 1 layer): of the 11 forwards before the first backward,
    # 0-3 and 8-10 run on chunk 0, 4-7 on chunk 1 (groups of pp micro-batches per chunk).
    assert interleaved_peak([1.0, 2.0], pp, 0, mbs) == pytest.approx(7 * 1.0 + 4 * 2.0)
    assert interleaved_peak([1.0, 2.0], pp, 0, mbs) < (warmup + 1) * 1.5
    # The EP-overlap schedule runs one more warm-up forward alone, then each forward beside a backward layer by
    # layer: the plain peak plus one layer (a quarter of a chunk here), not one more chunk.
    assert interleaved_peak([1.0] * vpp, pp, 0, mbs, pair_layer=0.25) == pytest.approx(warmup + 1.25)


def test_a_tensor_two_bf16_gemms_save_is_kept_once_but_fp8_copies_are_not():
    def graph(precision: str) -> OpGraph:
        g = OpGraph()
        norm = g.add(Op("moe_norm", "memory", saved_bytes=10.0))
        g.add(Op("router", "gemm", saved_bytes=10.0, deps=(norm,), precision=precision))
        g.add(Op("shared_experts.up_proj", "gemm", saved_bytes=10.0, deps=(norm,), precision=precision))
        return g
    assert shared_input_bytes(graph("bf16"), "none") == 10.0
    assert shared_input_bytes(graph("fp8"), "none") == 0.0
    assert shared_input_bytes(graph("bf16"), "full") == 0.0


def test_memory_report_has_ten_published_figures_within_ten_percent_median():
    rows = read_rows(REPORT)
    sources = {row["source"] for row in rows}
    assert len(rows) >= 10 and len(sources) >= 2
    results = validate_rows(rows)
    errors = [abs(r.predicted / r.measured - 1.0) for r in results]
    assert statistics.median(errors) <= 0.10
    assert max(errors) <= 0.25


def test_no_reshard_after_forward_holds_every_block_of_the_rank_gathered():
    """FSDP without reshard-after-forward keeps each block's unsharded 16-bit parameters from its
    forward to its backward: the rank's whole share (here all 16 blocks) instead of the prefetch window."""
    stack = load_stack("pytorch-fsdp2")
    kept = stack.model_copy(update={"sharding": stack.sharding.model_copy(update={"reshard_after_forward": False})})
    plan = f"tp=1,pp=1,dp=8,mbs={MBS},recompute=full,zero=3"
    held = simulate(_job(kept, plan)).memory_breakdown["buffers"]
    resharded = simulate(_job(stack, plan)).memory_breakdown["buffers"]
    m = small_dense()
    block = m.attention_params() + 2 * m.hidden + m.mlp_params(m.ffn_hidden)
    assert held - resharded >= (m.layers - stack.sharding.gathered_layers) * block * 2.0


def _mindspeed(**fields):
    stack = load_stack("mindspeed")
    return stack.model_copy(update={"memory": stack.memory.model_copy(update=fields)})


def test_mindspeed_reuse_fp32_param_saves_two_bytes_per_dp_sharded_parameter():
    """MindSpeed docs (reuse-fp32-param.md): with the distributed optimizer it saves
    sizeof(bfloat16) x parameters / DP of static memory."""
    plan = f"tp=1,pp=1,dp=8,mbs={MBS},recompute=full,zero=1"
    base = simulate(_job("mindspeed", plan))
    reused = simulate(_job("mindspeed", plan + ",reuse-fp32-param=true"))
    params = base.memory_breakdown["weights"] / 2.0  # 16-bit weights, unsharded at ZeRO-1
    saving = base.peak_memory_bytes - reused.peak_memory_bytes
    assert saving == pytest.approx(2.0 * params / 8, rel=1e-9)
    # A stack that turns it on by default does the same when the plan leaves it unset.
    assert simulate(_job(_mindspeed(reuse_fp32_param=True), plan)).peak_memory_bytes == reused.peak_memory_bytes


def test_mindspeed_swap_optimizer_keeps_one_part_of_the_optimizer_states_on_the_device():
    plan = f"tp=1,pp=1,dp=8,mbs={MBS},recompute=full,zero=1"
    base = simulate(_job(_mindspeed(), plan)).memory_breakdown["optimizer"]
    swapped = simulate(_job("mindspeed", plan + ",swap_optimizer=true")).memory_breakdown["optimizer"]
    assert swapped == pytest.approx(base / 16, rel=1e-9)
    assert simulate(_job(_mindspeed(swap_optimizer=True), plan)).memory_breakdown["optimizer"] == swapped


def _moe_model():
    data = small_dense().model_dump()
    data.update(id="small-moe", moe={"experts": 16, "topk": 2, "ffn_hidden": 1024})
    return type(small_dense()).model_validate(data)


def _moe_job(offload: str = "") -> TrainingJob:
    plan = f"tp=1,pp=1,dp=8,ep=8,mbs={MBS},recompute=selective,recompute_modules=moe_act,zero=1"
    if offload:
        plan += f",offload_modules={offload}"
    return TrainingJob(model=_moe_model(), cluster=load_hardware("gb200", 8), plan=parse_plan(plan),
                       seq_len=SEQ, global_batch=8 * MBS * 4, framework="megatron-lm")


def test_fine_grained_offload_moves_the_named_modules_saved_tensors_to_the_host():
    """Megatron's --offload-modules expert_fc1 moe_act: the experts' fc1 input and the activation's
    input leave the device; what recomputation already dropped is not offloaded."""
    base, off = _StepBuilder(_moe_job()), _StepBuilder(_moe_job("expert_fc1+moe_act"))
    graph = base.forward_graphs["moe"]
    expected = sum(op.saved_bytes for op in graph.ops if op.name in ("experts.up_proj", "experts.act"))
    mode = base.recompute_modes(1)[0]
    kept = layer_saved_bytes(base, "moe", mode) - layer_saved_bytes(off, "moe", mode)
    assert kept == pytest.approx(expected, rel=1e-12) and expected > 0
    before, after = simulate(_moe_job()), simulate(_moe_job("expert_fc1+moe_act"))
    layers = small_dense().layers
    # Every in-flight layer sheds the offloaded bytes; one layer's stay staged on the device.
    assert before.memory_breakdown["activations"] - after.memory_breakdown["activations"] == \
        pytest.approx((layers - 1) * expected * 1.05, rel=1e-6)
    assert after.feasible


def test_unknown_offload_module_is_one_clear_error():
    from windtunnel.specs.errors import WindtunnelError

    with pytest.raises(WindtunnelError, match="offload_modules"):
        simulate(_moe_job("expert_fc2"))
    assert "offload_modules=expert_fc1+moe_act" in parse_plan("offload-modules=expert_fc1+moe_act").to_string()


def test_op_level_sac_recomputes_cudnn_attention_on_blackwell():
    """torchtitan runs cuDNN attention first on Blackwell, which its save list does not name: the
    attention output and log-sum-exp are recomputed there, kept on Hopper."""
    def saved(hardware: str) -> float:
        job = TrainingJob(model=small_dense(), cluster=load_hardware(hardware, 8), seq_len=SEQ, global_batch=8 * MBS,
                          plan=parse_plan(f"tp=1,pp=1,dp=8,mbs={MBS},recompute=selective,zero=3"), framework="torchtitan")
        return layer_saved_bytes(_StepBuilder(job), "dense", "selective")
    m = small_dense()
    attention_out = (2 * m.heads * (m.hidden // m.heads) + 4 * m.heads) * SEQ * MBS
    assert saved("h100-sxm") - saved("b200") == pytest.approx(attention_out, rel=1e-9)
