"""The training stack is an input: catalog stacks, user stack files, plan defaults and their effects."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from windtunnel.api import simulate_training
from windtunnel.cli.app import app
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.plan import Plan
from windtunnel.specs.stack import load_stack, stack_names, with_stack_defaults

JOB = dict(seq_len=2048, global_batch=64)


def test_every_catalog_stack_loads_with_sources():
    for name in stack_names():
        stack = load_stack(name)
        assert stack.id == name
        assert stack.sources, f"stack {name} names no source"


def test_framework_help_lists_every_catalog_stack():
    # The --framework help is built from the catalog's stack files: a stack file's stem must be its id.
    from windtunnel.cli.app import FRAMEWORK_HELP
    from windtunnel.specs.stack import stack_path
    for name in stack_names():
        assert stack_path(name).is_file(), f"stack {name} is not in a file named after its id"
        assert f" {name}," in FRAMEWORK_HELP or f" {name} (default)" in FRAMEWORK_HELP, name


def test_inheritance_merges_fields():
    fsdp, foundry = load_stack("pytorch-fsdp"), load_stack("llm-foundry")
    assert foundry.zero == fsdp.zero == 3
    assert foundry.kernels.attention == "triton-fa-premlir" and fsdp.kernels.attention == "fa2"
    assert foundry.calibration_family == "pytorch-eager"
    assert load_stack("megatron-lm-2021").kernels.attention == "unfused"


def test_stack_defaults_fill_only_unset_plan_fields():
    fsdp = load_stack("pytorch-fsdp")
    assert with_stack_defaults(Plan(), fsdp).zero == 3
    assert with_stack_defaults(Plan(zero=1), fsdp).zero == 1
    assert with_stack_defaults(Plan(), load_stack("megatron-bridge")).grads == "bf16"
    assert with_stack_defaults(Plan(), load_stack("mindspeed")).dispatcher == "allgather"


def test_default_stack_reproduces_plain_defaults():
    plain = simulate_training("llama3-8b", "h100-sxm", 8, plan="tp=2,mbs=1", **JOB)
    named = simulate_training("llama3-8b", "h100-sxm", 8, plan="tp=2,mbs=1", framework="megatron", **JOB)
    assert plain.step_time_s == named.step_time_s and plain.framework == "megatron"


def test_framework_changes_the_prediction():
    megatron = simulate_training("llama3-8b", "h100-sxm", 8, plan="mbs=1", **JOB)
    fsdp = simulate_training("llama3-8b", "h100-sxm", 8, plan="mbs=1", framework="pytorch-fsdp", **JOB)
    assert fsdp.framework == "pytorch-fsdp"
    assert "zero=3" in fsdp.plan and "zero=1" in megatron.plan
    assert fsdp.step_time_s != megatron.step_time_s


def test_user_stack_file(tmp_path):
    path = tmp_path / "my-stack.yaml"
    path.write_text("inherits: pytorch-fsdp\nname: my fork\nzero: 2\nsources: {zero: 'our config'}\n")
    stack = load_stack(str(path))
    assert stack.id == "my-stack" and stack.zero == 2 and stack.kernels.attention == "fa2"
    result = simulate_training("llama3-8b", "h100-sxm", 8, plan="mbs=1", framework=str(path), **JOB)
    assert "zero=2" in result.plan


@pytest.mark.parametrize("bad, words", [("megatorn", "megatron"), ("Pytorch_FSDP", "pytorch-fsdp")])
def test_unknown_framework_is_a_clear_error(bad, words):
    with pytest.raises(WindtunnelError, match=words):
        load_stack(bad)


def test_bad_stack_file_names_the_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("inherits: pytorch-fsdp\nkernels: {fused_loss: maybe}\n")
    with pytest.raises(WindtunnelError, match="kernels.fused_loss"):
        load_stack(str(path))
    path.write_text("inherits: nothing-like-this\n")
    with pytest.raises(WindtunnelError, match="inherits unknown stack"):
        load_stack(str(path))
    path.write_text("inherits: megatron\nkernels: {rope: eager, rope_eager_costs: [10, -1, 8, 10]}\n")
    with pytest.raises(WindtunnelError, match=r"kernels.rope_eager_costs.1.*greater than or equal to 0"):
        load_stack(str(path))
    path.write_text("inherits: megatron\nkernels: {rope: sometimes}\n")
    with pytest.raises(WindtunnelError, match="kernels.rope.*'fused', 'fused_unscaled' or 'eager'"):
        load_stack(str(path))


def test_cli_framework_flag_and_bad_value():
    runner = CliRunner()
    args = ["train", "simulate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8",
            "--seq-len", "2048", "--global-batch", "64", "--plan", "mbs=1", "--json"]
    ok = runner.invoke(app, [*args, "--framework", "deepspeed"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["framework"] == "deepspeed"
    bad = runner.invoke(app, [*args, "--framework", "nope"])
    assert bad.exit_code != 0


def test_allgather_dispatch_volume_does_not_grow_with_topk():
    from windtunnel.graph.transformer import Sharding, layer_forward
    from windtunnel.specs.model import load_model

    model = load_model("mixtral-8x7b")
    gathered = layer_forward(model, Sharding(ep=4, gather_dispatch=True), moe=True)
    routed = layer_forward(model, Sharding(ep=4, dedup_dispatch=False), moe=True)
    size = {g: next(op.bytes_moved for op in graph.ops if op.name == "dispatch")
            for g, graph in (("gather", gathered), ("routed", routed))}
    kinds = {op.kind for op in gathered.ops if op.name in ("dispatch", "combine")}
    assert kinds == {"all_gather", "reduce_scatter"}
    # all-gather buffer: ep x tokens; all-to-all buffer: top-k x tokens
    assert size["gather"] / size["routed"] == pytest.approx(4 / model.moe.topk)


def test_zero3_transfer_slows_overlapped_compute():
    from windtunnel.train.layers import zero3_exposed

    assert zero3_exposed(10.0, 4.0, 0.0) == 0.0
    assert zero3_exposed(2.0, 4.0, 0.0) == pytest.approx(2.0)
    slowed = zero3_exposed(10.0, 4.0, 0.12)
    assert slowed == pytest.approx(0.12 * 4.0)
    # Transfer longer than the slowed compute: the layer takes the transfer's time.
    assert zero3_exposed(1.0, 4.0, 0.5) == pytest.approx(3.0)


def test_jax_stack_runs_on_its_own_calibration_family():
    """The xla family has calibration rows of its own (the single-node MaxText runs G36, G37 in
    validation/dgxc_training_runs.csv): the jax stack's BF16 GEMMs on H100 use its fit, not Megatron's,
    while its FP8 GEMMs (no single-node XLA FP8 row) keep the default family's fit."""
    from windtunnel.cost.efficiency import efficiency_for
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.specs.yamlio import catalog_dir, read_yaml

    report = read_yaml(catalog_dir("calibration.yaml"))["fit_report"]
    assert report["xla generation hopper"]["rows"] == ["G36", "G37"]
    assert set(report["xla generation hopper"]["parameters"]) == {"gemm.bf16", "attention.flash.fwd"}
    chip = load_hardware("h100-sxm", 8).chip
    xla, default = efficiency_for(chip, family="xla"), efficiency_for(chip, family="megatron")
    assert xla.gemm_efficiency("bf16") == pytest.approx(report["xla chip h100-sxm"]["parameters"]["gemm.bf16"])
    assert xla.gemm_efficiency("bf16") != default.gemm_efficiency("bf16")
    assert xla.gemm_efficiency("fp8") == default.gemm_efficiency("fp8")
