"""The profiling verbs (calibrate collectives / trace, probe) on a Typer app built here, and the probe fit."""

from __future__ import annotations

import importlib.util
import json

import pytest
import typer
import yaml
from typer.testing import CliRunner

from conftest import DATA
from profiling_synth import probe_record
from windtunnel.cli.profiling import register
from windtunnel.profile import load_profile, package_dir, prior_value
from windtunnel.profiling.fit_probe import fit_probe
from windtunnel.profiling.probe import detect_chip, run_probe
from windtunnel.specs.errors import WindtunnelError

LOGS = DATA / "profiling"
PROBE = LOGS / "probe_h200_synthetic.json"
# The recorded probe was generated under these values (tests/data/profiling/README.md).
PROBE_HIDDEN = {"gemm.bf16": 0.71, "gemm.fp16": 0.70, "gemm.fp8": 0.58, "attention.fa2.fwd": 0.36,
                "attention.fa2.bwd": 0.29, "attention.flash.fwd": 0.62, "attention.flash.bwd": 0.50,
                "memory.bandwidth_efficiency": 0.86, "comm.scale_up_efficiency": 0.81, "comm.half_message_bytes": 3.5e5}
TRACE_ARGS = ["--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--seq-len", "4096",
              "--global-batch", "16", "--plan", "tp=1,pp=1,mbs=1"]


def make_app() -> typer.Typer:
    app = typer.Typer()
    calibrate = typer.Typer()
    app.add_typer(calibrate, name="calibrate")
    register(calibrate, app)
    return app


def invoke(*args: str):
    return CliRunner().invoke(make_app(), list(args))


def shipped_catalog_bytes() -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted((package_dir() / "catalog").rglob("*.yaml"))}


def test_calibrate_collectives_json_contract_and_profile(tmp_path):
    before = shipped_catalog_bytes()
    out = tmp_path / "my-h100.yaml"
    result = invoke("calibrate", "collectives", str(LOGS / "all_reduce_perf_8xh100.log"),
                    str(LOGS / "all_reduce_perf_2x8xh100.log"), "--hardware", "h100-sxm", "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["rows_used"] == 32 and 0 < doc["loo_median_abs_error"] < 0.05
    params = {p["name"]: p for p in doc["parameters"]}
    assert set(params) == {"comm.scale_up_efficiency", "comm.scale_out_efficiency", "comm.half_message_bytes",
                           "comm.tree_bandwidth_factor"}
    # The model runs the 16-rank all-reduce as a double binary tree at some sizes: its factor is seen
    # (the logs were generated at the prior 0.5).
    assert params["comm.tree_bandwidth_factor"]["value"] == pytest.approx(0.5, rel=0.05)
    for p in params.values():
        assert {"name", "value", "prior", "bounds", "identified"} <= set(p)
    assert params["comm.scale_out_efficiency"]["value"] == pytest.approx(0.88, rel=0.05)
    profile = load_profile(out)
    assert profile.chip == "h100-sxm" and profile.stack is None
    assert profile.identified()["comm.scale_up_efficiency"] == pytest.approx(0.78, rel=0.05)
    assert profile.fit["collectives"]["rows_used"] == 32
    assert shipped_catalog_bytes() == before  # the shipped calibration is untouched


def test_unidentified_parameter_never_overwrites_a_fitted_one(tmp_path):
    out = tmp_path / "p.yaml"
    two = [str(LOGS / "all_reduce_perf_8xh100.log"), str(LOGS / "all_reduce_perf_2x8xh100.log")]
    assert invoke("calibrate", "collectives", *two, "--hardware", "dgx-h100", "--out", str(out)).exit_code == 0
    fitted = load_profile(out).identified()["comm.scale_out_efficiency"]
    one = invoke("calibrate", "collectives", str(LOGS / "all_reduce_perf_8xh100.log"), "--hardware", "h100-sxm",
                 "--out", str(out))
    assert one.exit_code == 0, one.output
    assert load_profile(out).identified()["comm.scale_out_efficiency"] == fitted
    assert len(load_profile(out).inputs) == 2  # the repeated log is one input


def test_calibrate_collectives_hccl_and_cluster_mismatch(tmp_path):
    ok = invoke("calibrate", "collectives", str(LOGS / "all_reduce_test_8x910b.log"), "--hardware", "ascend-910b",
                "--cluster", "atlas-800t-a2", "--json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["cluster"] == "atlas-800t-a2"
    bad = invoke("calibrate", "collectives", str(LOGS / "all_reduce_test_8x910b.log"), "--hardware", "h100-sxm",
                 "--cluster", "atlas-800t-a2")
    assert isinstance(bad.exception, WindtunnelError) and "ascend-910b" in str(bad.exception)


def test_calibrate_trace_writes_a_stack_profile(tmp_path):
    out = tmp_path / "trace.yaml"
    result = invoke("calibrate", "trace", str(LOGS / "kineto_llama3-8b_h100_2steps.json"), *TRACE_ARGS,
                    "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["loo_median_abs_error"] is None and doc["rows_used"] == 40
    assert {p["name"]: p["value"] for p in doc["parameters"]}["gemm.bf16"] == pytest.approx(0.62, rel=0.01)
    profile = load_profile(out)
    assert profile.stack == "megatron" and profile.inputs[0]["steps"] == 2
    assert yaml.safe_load(out.read_text())["fit"]["trace"]["per_kind"]["gemm"]["kernels"] == 12


def test_calibrate_trace_text_output_and_profile_inside_package_is_refused(tmp_path):
    text = invoke("calibrate", "trace", str(LOGS / "kineto_llama3-8b_h100_2steps.json"), *TRACE_ARGS)
    assert text.exit_code == 0 and "gemm.bf16" in text.output and "fitted" in text.output
    inside = invoke("calibrate", "trace", str(LOGS / "kineto_llama3-8b_h100_2steps.json"), *TRACE_ARGS,
                    "--out", str(package_dir() / "catalog" / "mine.yaml"))
    assert isinstance(inside.exception, WindtunnelError) and "installed windtunnel package" in str(inside.exception)
    assert not (package_dir() / "catalog" / "mine.yaml").exists()


def test_probe_record_fits_back_its_hidden_values():
    fit = fit_probe(json.loads(PROBE.read_text()))
    values = {p.name: p for p in fit.parameters}
    assert fit.chip == "h200"
    for name, value in PROBE_HIDDEN.items():
        assert values[name].identified and values[name].value == pytest.approx(value, rel=0.02), name
    assert not values["comm.scale_out_efficiency"].identified  # one host: no scale-out rows
    assert fit.loo_median_abs_error < 0.03


def test_probe_round_trip_on_another_chip():
    hidden = {"gemm.bf16": 0.55, "attention.flash.fwd": 0.45, "memory.bandwidth_efficiency": 0.70}
    record = probe_record("ascend-910b", hidden, device="Ascend910B3")
    record["gemm"].append({"dtype": "fp8", "m": 8192, "n": 8192, "k": 8192, "seconds": 1e-3})
    values = {p.name: p.value for p in fit_probe(record).parameters}
    for name, value in hidden.items():
        assert values[name] == pytest.approx(value, rel=0.02), name
    assert "gemm.fp8" not in values  # 910B has no fp8 peak: those rows are not used


def test_probe_from_record_cli(tmp_path):
    out = tmp_path / "probe.yaml"
    result = invoke("probe", "--from-record", str(PROBE), "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["chip"] == "h200" and doc["rows_used"] > 50
    assert load_profile(out).identified()["gemm.fp8"] == pytest.approx(0.58, rel=0.02)
    assert load_profile(out).identified()["gemm.bf16"] != prior_value("h200", "gemm.bf16")


def test_bad_probe_record_is_one_clear_error(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"gemm": []}')
    result = invoke("probe", "--from-record", str(path))
    assert isinstance(result.exception, WindtunnelError) and "probe record" in str(result.exception)
    record = json.loads(PROBE.read_text())
    record["gemm"][0]["seconds"] = -1
    with pytest.raises(WindtunnelError, match="seconds"):
        fit_probe(record)
    with pytest.raises(WindtunnelError, match="not in the catalog"):
        fit_probe(dict(record, chip="tpu-v5"))


@pytest.mark.parametrize(("name", "chip"), [("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H200", "h200"),
                                            ("NVIDIA A100-SXM4-80GB", "a100-80g"), ("NVIDIA B200", "b200"),
                                            ("NVIDIA GB200", "gb200"), ("NVIDIA B300 SXM6 AC", "b300"),
                                            ("NVIDIA GB300", "gb300")])
def test_device_names_map_to_catalog_chips(name, chip):
    assert detect_chip(name) == chip


def test_unknown_device_is_a_clear_error():
    with pytest.raises(WindtunnelError, match="--hardware"):
        detect_chip("NVIDIA GeForce RTX 4090")


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_probe_without_torch_says_how_to_install():
    with pytest.raises(WindtunnelError, match=r"pip install 'windtunnel\[torch\]'"):
        run_probe(quick=True)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the device probe needs torch")
def test_probe_on_local_device_quick():  # runs where torch and a CUDA device are present
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    record = run_probe(quick=True)
    fit = fit_probe(record)
    assert any(p.name == "gemm.bf16" and p.identified for p in fit.parameters)


def test_trace_profile_makes_the_simulator_reproduce_the_traced_compute(tmp_path):
    from windtunnel.api import resolve_model, simulate_training
    from windtunnel.profiling.fit_trace import step_ops
    from windtunnel.profiling.kineto import read_trace
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.specs.plan import parse_plan
    from windtunnel.train.step import TrainingJob

    out = tmp_path / "trace.yaml"
    trace = LOGS / "kineto_llama3-8b_h100_2steps.json"
    assert invoke("calibrate", "trace", str(trace), *TRACE_ARGS, "--gaps", "--out", str(out)).exit_code == 0
    summary = read_trace(trace)
    durations = sum(summary.per_step(kind) for kind in ("gemm", "attention.fwd", "attention.bwd", "memory"))
    job = TrainingJob(model=resolve_model("llama3-8b")[0], cluster=load_hardware("h100-sxm", 8),
                      plan=parse_plan("tp=1,pp=1,mbs=1"), seq_len=4096, global_batch=16)
    launches = sum(count for _, count in step_ops(job)[1])
    kwargs = dict(seq_len=4096, global_batch=16, plan="tp=1,pp=1,mbs=1")
    before = simulate_training("llama3-8b", "h100-sxm", 8, **kwargs)
    after = simulate_training("llama3-8b", "h100-sxm", 8, profile=out, **kwargs)
    # The step's kernels as traced, plus the fitted launch gap (2 us) per kernel the model launches.
    expected = durations + launches * summary.median_gap_s
    assert after.breakdown["compute"] + after.breakdown["recompute"] == pytest.approx(expected, rel=2e-3)
    assert abs(before.breakdown["compute"] + before.breakdown["recompute"] - expected) > 0.05 * expected
    assert any("profile" in line for line in after.assumptions)


def test_fits_are_deterministic():
    args = ["calibrate", "collectives", str(LOGS / "all_reduce_perf_8xh100.log"),
            str(LOGS / "all_reduce_perf_2x8xh100.log"), "--hardware", "h100-sxm", "--json"]
    assert invoke(*args).output == invoke(*args).output
    trace = ["calibrate", "trace", str(LOGS / "kineto_llama3-8b_h100_2steps.json"), *TRACE_ARGS, "--json"]
    assert invoke(*trace).output == invoke(*trace).output


def _stand_in_torch():
    """A minimal stand-in for the torch API the probe calls (no device): checks the calls, not the numbers."""
    import contextlib
    import types

    class Tensor:
        def __init__(self, *shape):
            self.shape = shape

        def to(self, _dtype):
            return self

        def t(self):
            return Tensor(*reversed(self.shape))

        def copy_(self, _other):
            return self

    class Event:
        count = 0

        def __init__(self, enable_timing=False):
            assert enable_timing

        def record(self):
            Event.count += 1

        def elapsed_time(self, _end):
            return 2.0  # ms for the timed iterations

    torch = types.ModuleType("torch")
    torch.__version__ = "0.0-stand-in"
    torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.uint8 = "bf16", "fp16", "fp8", "u8"
    torch.version = types.SimpleNamespace(cuda="12.4")
    torch.cuda = types.SimpleNamespace(
        is_available=lambda: True, get_device_name=lambda _i: "NVIDIA H200", device_count=lambda: 1,
        get_device_capability=lambda _i: (9, 0), Event=Event, synchronize=lambda: None, empty_cache=lambda: None)
    torch.randn = lambda *shape, **_: Tensor(*shape)
    torch.randn_like = lambda t: Tensor(*t.shape)
    torch.ones = lambda *shape, **_: Tensor(*shape)
    torch.empty = lambda size, **_: Tensor(size)
    torch.empty_like = lambda t: Tensor(*t.shape)
    torch.matmul = lambda a, b: Tensor(a.shape[0], b.shape[1])
    torch._scaled_mm = lambda a, b, scale_a, scale_b, out_dtype: Tensor(a.shape[0], b.shape[1])
    torch.autograd = types.SimpleNamespace(grad=lambda out, inputs, grad: inputs)
    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend = types.SimpleNamespace(FLASH_ATTENTION="flash", CUDNN_ATTENTION="cudnn")
    attention.sdpa_kernel = lambda backends: contextlib.nullcontext()
    functional = types.ModuleType("torch.nn.functional")
    functional.scaled_dot_product_attention = lambda q, k, v: Tensor(*q.shape)
    nn = types.ModuleType("torch.nn")
    nn.attention, nn.functional = attention, functional
    torch.nn = nn
    return {"torch": torch, "torch.nn": nn, "torch.nn.attention": attention, "torch.nn.functional": functional}


def test_probe_device_code_with_a_stand_in_torch(monkeypatch, tmp_path):
    import sys

    for name, module in _stand_in_torch().items():
        monkeypatch.setitem(sys.modules, name, module)
    record = run_probe(quick=True)
    assert record["chip"] == "h200" and record["devices"] == 1 and record["collectives"] == []
    assert {row["dtype"] for row in record["gemm"]} == {"bf16", "fp16", "fp8"}
    assert {row["backend"] for row in record["attention"]} == {"flash", "cudnn"}
    assert all(row["seconds"] == pytest.approx(2e-3 / 5) for row in record["gemm"])  # 2 ms over 5 iterations
    path, out = tmp_path / "record.json", tmp_path / "probe.yaml"
    result = invoke("probe", "--quick", "--record", str(path), "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["chip"] == "h200"
    assert json.loads(path.read_text())["gemm"] == record["gemm"]
    assert load_profile(out).chip == "h200"
