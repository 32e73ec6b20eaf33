"""Multi-token prediction / speculative decoding (deployment keys mtp, accept)."""

from __future__ import annotations

import pytest

from windtunnel.infer.deployment import InstanceSpec, parse_deployment, resolve_instance
from windtunnel.infer.iteration import IterationModel
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.model import load_model


def _decode_alpha(**spec) -> float:
    m = load_model("deepseek-v3")
    it = IterationModel(m, resolve_instance(m, "h800", InstanceSpec(role="decode", ep=32, dp=32, **spec)))
    return it.decode_coefficients(32 * 32, 32 * 32 * 2048.0)[0]


def test_mtp_speeds_up_decode_by_less_than_its_yield() -> None:
    plain = _decode_alpha()
    mtp = _decode_alpha(mtp=1, accept=0.85)
    speedup = plain / mtp
    assert 1.2 < speedup < 1.85  # yield 1.85 tokens per step; the draft layer and the extra token cost something


def test_zero_acceptance_makes_speculation_a_loss() -> None:
    assert _decode_alpha(mtp=2, accept=0.0) > _decode_alpha()


def test_higher_acceptance_is_faster() -> None:
    assert _decode_alpha(mtp=2, accept=0.9) < _decode_alpha(mtp=2, accept=0.6)


def test_mtp_keys_parse_and_bad_acceptance_is_one_clear_error() -> None:
    dep = parse_deployment("prefill:ep=16,dp=16;decode:ep=32,dp=32,mtp=1,accept=0.8")
    assert dep.groups[1].mtp == 1 and dep.groups[1].accept == pytest.approx(0.8)
    assert "mtp=1" in dep.text()
    with pytest.raises(WindtunnelError, match="accept"):
        parse_deployment("decode:ep=32,dp=32,mtp=1,accept=1.5;prefill:ep=16,dp=16")
