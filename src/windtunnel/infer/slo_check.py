"""Latency objectives no deployment of this shape can meet: a TPOT below one decode iteration of a single
sequence, a TTFT below the prefill of the traffic's smallest prompt on an idle instance. Such an SLO is
not an error (the simulation still answers), but every result that uses it carries a warning."""

from __future__ import annotations

from windtunnel.infer.metrics import SLO


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def slo_warnings(instances, slo: SLO, prompt_tokens: int) -> list[str]:
    """Warnings for ``slo`` against the serving ``instances`` (each with a ``role`` and its IterationModel
    ``cost``) and the traffic's smallest prompt (``prompt_tokens``)."""
    warnings: list[str] = []
    decoders = list({id(i.cost): i.cost for i in instances if i.role in ("mixed", "decode")}.values())
    prefillers = list({id(i.cost): i.cost for i in instances if i.role in ("mixed", "prefill")}.values())
    if slo.tpot_s is not None and decoders:
        floor = min(c.time(1, 1, 1.0, decoding=1) for c in decoders)
        if slo.tpot_s < floor:
            warnings.append(f"SLO tpot={_ms(slo.tpot_s)} is below one decode iteration of a single sequence "
                            f"({_ms(floor)} on the fastest pool): no request can meet it; check the unit (e.g. "
                            "tpot=100ms).")
    if slo.ttft_s is not None and prefillers and prompt_tokens > 0:
        floor = min(c.time(prompt_tokens, 1, 0.0, prefill_attention_s=c.prefill_attention(prompt_tokens, 0))
                    for c in prefillers)
        if slo.ttft_s < floor:
            warnings.append(f"SLO ttft={_ms(slo.ttft_s)} is below the prefill of the smallest prompt "
                            f"({prompt_tokens} tokens) on an idle instance ({_ms(floor)}): no request can meet it.")
    return warnings


def deployment_slo_warnings(model, hardware: str, deployment: str, slo: SLO, prompt_tokens: int) -> list[str]:
    """``slo_warnings`` for a deployment string (the search's best or closest) on ``hardware``."""
    from types import SimpleNamespace

    from windtunnel.infer.deployment import parse_deployment, resolve_deployment
    from windtunnel.infer.iteration import IterationModel

    plans = resolve_deployment(model, hardware, parse_deployment(deployment))
    found = slo_warnings([SimpleNamespace(role=plan.role, cost=IterationModel(model, plan)) for plan in plans], slo,
                         prompt_tokens)
    return [f"{line} (checked on {deployment})" for line in found]
