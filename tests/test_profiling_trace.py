"""Kineto trace parsing, kernel-name classification and the per-kind efficiency fit."""

from __future__ import annotations

import json

import pytest

from conftest import DATA
from profiling_synth import KERNEL_NAMES, kineto_trace, trace_kind_times
from windtunnel.api import resolve_model
from windtunnel.profiling.fit_trace import fit_trace
from windtunnel.profiling.kernel_kinds import kernel_kind
from windtunnel.profiling.kineto import read_trace
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.plan import parse_plan
from windtunnel.train.step import TrainingJob

TRACE = DATA / "profiling" / "kineto_llama3-8b_h100_2steps.json"
# The recorded trace was generated under these values (tests/data/profiling/README.md).
HIDDEN = {"memory.bandwidth_efficiency": 0.68, "gemm.bf16": 0.62, "attention.flash.fwd": 0.52,
          "attention.flash.bwd": 0.41}


def llama_job(plan: str = "tp=1,pp=1,mbs=1", global_batch: int = 16, framework: str = "megatron") -> TrainingJob:
    spec, _ = resolve_model("llama3-8b")
    return TrainingJob(model=spec, cluster=load_hardware("h100-sxm", 8), plan=parse_plan(plan), seq_len=4096,
                       global_batch=global_batch, framework=framework)


@pytest.mark.parametrize(("name", "kind"), [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm.all_reduce"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "comm.all_gather"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "comm.send_recv"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "comm.other"),
    ("hcom_allReduce__425_0_1", "comm.all_reduce"),
    ("hcom_reduceScatter__425_1_1", "comm.reduce_scatter"),
    ("hcom_alltoallv__12_0_1", "comm.all_to_all"),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "gemm"),
    ("ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_tn", "gemm"),
    ("void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, false>", "gemm"),
    ("MatMulV2", "gemm"), ("BatchMatMulV2", "gemm"), ("GroupedMatmul", "gemm"),
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>",
     "attention.fwd"),
    ("void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8>>",
     "attention.bwd"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t>::Params)",
     "attention.fwd"),
    ("fmha_cutlassB_bf16_aligned_128x64_k128_sm80", "attention.bwd"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", "attention.fwd"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_2_64x64x128_4x1x1_kernel0_0", "attention.bwd"),
    ("FlashAttentionScore", "attention.fwd"), ("FlashAttentionScoreGrad", "attention.bwd"),
    ("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float*, float>", "optimizer"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>", "memory"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "memory"),
    ("RmsNorm", "memory"), ("Cast", "memory"), ("aclnnAdd_AddAiCore_Add", "memory"),
    ("aclnnMm_MatMulCommon_MatMulV2", "gemm"), ("aclnnFlashAttentionScoreGrad_FlashAttentionScoreGrad", "attention.bwd"),
    ("aclnnApplyAdamWV2_ApplyAdamWV2", "optimizer"),
    ("void my_custom_fused_op_kernel<256>(float const*, float*, int)", "other"),
])
def test_kernel_names_map_to_operator_kinds(name, kind):
    assert kernel_kind(name) == kind


def test_copy_engine_work_is_memcpy():
    assert kernel_kind("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy") == "memcpy"
    assert kernel_kind("Memset (Device)", "gpu_memset") == "memcpy"


def test_recorded_trace_has_two_steps_and_leaves_out_the_warm_up_kernel():
    summary = read_trace(TRACE)
    assert summary.steps == 2 and summary.step_names == ["ProfilerStep#3", "ProfilerStep#4"]
    assert summary.device == "0"
    assert summary.kinds["memory"].count == 2 * 2 * len(KERNEL_NAMES["memory"])  # the warm-up one is not counted
    assert summary.per_step("gemm") == pytest.approx(0.674109, rel=1e-5)
    assert summary.median_gap_s == pytest.approx(2e-6)
    assert summary.kinds["memcpy"].count == 1
    assert summary.kinds["comm.reduce_scatter"].count == 2
    assert 0 < summary.idle_per_step_s < 1e-3  # 2 us launch gaps between back-to-back kernels


def test_recorded_trace_fits_back_the_hidden_efficiencies():
    fit = fit_trace(read_trace(TRACE), llama_job())
    values = {p.name: p for p in fit.parameters}
    for name, value in HIDDEN.items():
        assert values[name].identified
        assert values[name].value == pytest.approx(value, rel=0.01), name
    assert values["gemm.bf16"].prior != pytest.approx(0.62, rel=0.01)  # the fit moved it
    kinds = read_trace(TRACE).kinds
    assert fit.rows_used == sum(kinds[k].count for k in ("memory", "gemm", "attention.fwd", "attention.bwd"))
    stats = fit.fit_stats()
    assert stats["loo_median_abs_error"] is None and "held out" in stats["loo_reason"]
    assert stats["per_kind"]["gemm"]["residual_at_prior"] < 0  # the prior model was faster than the trace
    assert stats["per_kind"]["optimizer"]["note"] == "reported, not fitted"
    assert not fit.warnings


def test_round_trip_under_another_plan_and_stack(tmp_path):
    job = llama_job(plan="tp=2,pp=2,mbs=2", global_batch=16, framework="pytorch-fsdp")
    hidden = {"memory.bandwidth_efficiency": 0.80, "gemm.bf16": 0.55}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(kineto_trace(trace_kind_times(job, hidden, rank=1), steps=3)))
    fit = fit_trace(read_trace(path), job, rank=1)
    values = {p.name: p.value for p in fit.parameters}
    for name, value in hidden.items():
        assert values[name] == pytest.approx(value, rel=0.01), name


def test_a_trace_of_another_job_is_flagged_and_clipped_to_bounds(tmp_path):
    summary = read_trace(TRACE)
    fit = fit_trace(summary, llama_job(global_batch=64))  # 8 micro-batches modelled, 2 traced
    assert any("check that the job" in w for w in fit.warnings)
    gemm = next(p for p in fit.parameters if p.name == "gemm.bf16")
    assert gemm.value == gemm.bounds[1]


def test_trace_without_step_annotations_uses_steps(tmp_path):
    doc = kineto_trace({"gemm": 0.01, "memory": 0.002}, steps=1)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not e["name"].startswith("ProfilerStep")]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    one, two = read_trace(path), read_trace(path, steps=2)
    assert one.steps == 1 and two.per_step("gemm") == pytest.approx(one.per_step("gemm") / 2)


@pytest.mark.parametrize(("content", "needle"), [
    ('{"foo": 1}', "traceEvents"),
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2}]}', "no device kernels"),
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": "soon", "dur": 2}]}', "not a number"),
    ('{"traceEvents": [', "Malformed JSON"),
])
def test_bad_traces_are_one_clear_error(tmp_path, content, needle):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(WindtunnelError, match=needle):
        read_trace(path)


def test_several_devices_need_device(tmp_path):
    doc = kineto_trace({"gemm": 0.01}, steps=1)
    extra = dict(next(e for e in reversed(doc["traceEvents"]) if e.get("cat") == "kernel"))
    extra["args"] = dict(extra["args"], device=1)
    doc["traceEvents"].append(extra)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(WindtunnelError, match="--device"):
        read_trace(path)
    assert read_trace(path, device="1").kernels == 1
    with pytest.raises(WindtunnelError, match="no kernels on device '5'"):
        read_trace(path, device="5")


def test_pipeline_rank_out_of_range_is_an_error():
    with pytest.raises(WindtunnelError, match="rank"):
        fit_trace(read_trace(TRACE), llama_job(), rank=3)


def test_ascend_style_trace_reads_device_tasks_by_process_name(tmp_path):
    # torch_npu's profiler: device tasks under processes named "Ascend Hardware" / "HCCL", CANN op names.
    events = [{"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "Ascend Hardware"}},
              {"ph": "M", "name": "process_name", "pid": 8, "args": {"name": "HCCL"}},
              {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 900}]
    for i, (pid, name, dur) in enumerate([(7, "MatMulV2", 300.0), (7, "BatchMatMulV2", 100.0),
                                          (7, "FlashAttentionScore", 80.0), (7, "FlashAttentionScoreGrad", 160.0),
                                          (7, "RmsNorm", 20.0), (8, "hcom_allReduce__425_0_1", 50.0)]):
        events.append({"ph": "X", "name": name, "pid": pid, "tid": 3, "ts": 10.0 + 100 * i, "dur": dur, "args": {}})
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(events))  # a bare event list is accepted too
    summary = read_trace(path)
    assert summary.device == "npu"
    assert summary.per_step("gemm") == pytest.approx(400e-6)
    assert summary.kinds["attention.bwd"].count == 1 and summary.kinds["memory"].count == 1
    assert summary.kinds["comm.all_reduce"].count == 1


def test_gaps_fit_the_kernel_overhead_only_when_asked():
    summary = read_trace(TRACE)
    default = {p.name: p for p in fit_trace(summary, llama_job()).parameters}["kernel_overhead_s"]
    assert not default.identified and "--gaps" in default.source
    fitted = {p.name: p for p in fit_trace(summary, llama_job(), gaps=True).parameters}["kernel_overhead_s"]
    assert fitted.identified and fitted.value == pytest.approx(2e-6)  # the trace's launch gaps


def test_step_to_step_scatter_gives_the_standard_error(tmp_path):
    path = tmp_path / "t.json"
    hidden = {"gemm.bf16": 0.6}
    path.write_text(json.dumps(kineto_trace(trace_kind_times(llama_job(), hidden), steps=4, jitter=0.02)))
    summary = read_trace(path)
    gemm = {p.name: p for p in fit_trace(summary, llama_job()).parameters}["gemm.bf16"]
    # Steps at 1.02 and 0.98 x: sample std 0.0231 of the mean, over sqrt(4).
    assert summary.step_spread("gemm") == pytest.approx(0.02 * (4 / 3) ** 0.5 / 2, rel=1e-3)
    assert gemm.stderr == pytest.approx(gemm.value * summary.step_spread("gemm"))
    assert gemm.value == pytest.approx(0.6, rel=0.01)
    assert {p.name: p for p in fit_trace(read_trace(TRACE), llama_job()).parameters}["gemm.bf16"].stderr == 0.0
