"""Sim2Infer: LLM serving under real traffic.

Traffic (arrival processes, length mixes, phases, trace replay) -> routers -> instances (mixed,
prefill or decode; own parallel plan, chip, paged KV cache, continuous batching with chunked
prefill, preemption by recompute) -> iteration times from the shared cost core -> request metrics
(TTFT, TPOT, E2E), throughput and SLO goodput; a deployment search; a dynamic role-switching policy.
The public entry points are in :mod:`windtunnel.infer.api`.
"""
