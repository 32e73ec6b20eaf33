"""Map a probe record (microbenchmark results, see :mod:`windtunnel.profiling.probe`) to profile parameters.

Pure: a record in, parameters out; no torch. Each measurement is inverted through the simulator's own cost
function so that the profile reproduces it: a GEMM through :func:`windtunnel.cost.compute.gemm_time`
(tiles, waves, reduction-length ramp), an attention call through
:func:`windtunnel.cost.compute.attention_time` (key-length ramp, the catalog's half length), a
device-to-device copy through :func:`windtunnel.cost.compute.memory_op_time`, collectives through
:func:`windtunnel.profiling.fit_collectives.fit_collectives`. A parameter's value is the median of the
per-measurement solutions over the larger half of its measurements (small ones mostly measure launch
overhead); its standard error is their spread over sqrt(n).

Record (JSON, ``windtunnel_probe: 1``): ``device`` (``torch.cuda.get_device_name``), ``chip`` (catalog id),
``gemm``: [{dtype, m, n, k, seconds}], ``attention``: [{backend, batch, heads, seq_len, head_dim, fwd_s,
bwd_s}] (non-causal), ``memory``: [{bytes, seconds}] (a copy of ``bytes``: reads and writes them),
``collectives``: [{collective, ranks, rows: [{size_bytes, time_s}]}] (sizes as nccl-tests counts them).
Attention backends: PyTorch's ``FLASH_ATTENTION`` SDPA backend runs FlashAttention-2 kernels (PyTorch
``torch.nn.functional.scaled_dot_product_attention`` documentation), so it fits ``attention.fa2.*``;
``CUDNN_ATTENTION`` (cuDNN's fused flash attention) fits the calibrated fused kernel ``attention.flash.*``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

from windtunnel.cost.compute import attention_time, gemm_time, memory_op_time
from windtunnel.cost.efficiency import Efficiency, efficiency_for
from windtunnel.graph.ops import Op
from windtunnel.profile import PARAMETERS, FittedParameter, prior_value
from windtunnel.profiling.collective_bench import BenchLog, BenchRow, bus_factor
from windtunnel.profiling.fit_trace import with_value
from windtunnel.specs.errors import WindtunnelError, choices_text
from windtunnel.specs.hardware import Chip, chip_names, load_chip
from windtunnel.specs.yamlio import read_json

RECORD_VERSION = 1
BACKENDS = {"flash": "fa2", "cudnn": "flash"}  # SDPA backend -> attention kernel of the cost model
ACT_BYTES = 2.0  # 16-bit q, k, v, o


@dataclass
class ProbeFit:
    """Parameters fitted from a probe record, with the per-measurement solutions behind them."""

    chip: str
    parameters: list[FittedParameter]
    rows_used: int
    loo_median_abs_error: float | None
    details: dict = field(default_factory=dict)

    def fit_stats(self) -> dict:
        return {"rows_used": self.rows_used, "loo_median_abs_error": self.loo_median_abs_error,
                "loo": "collectives only (leave-one-message-size-out); kernels: spread of per-shape solutions",
                **self.details}


def read_record(path: str | Path) -> dict:
    """A probe record from JSON; not a record is one clear error."""
    data = read_json(path)
    if not isinstance(data, dict) or data.get("windtunnel_probe") != RECORD_VERSION:
        raise WindtunnelError(f"'{path}' is not a windtunnel probe record (expected a JSON object with "
                              f"'windtunnel_probe: {RECORD_VERSION}', written by `windtunnel probe --record`).",
                              field="from_record")
    return data


def _solve(seconds: float, model, lo: float, hi: float) -> float:
    """The efficiency in [lo, hi] at which the decreasing ``model(eff)`` gives ``seconds``."""
    from scipy.optimize import brentq

    if model(lo) <= seconds:
        return lo
    if model(hi) >= seconds:
        return hi
    return float(brentq(lambda v: model(v) - seconds, lo, hi, xtol=1e-6))


def _summarise(name: str, solutions: list[tuple[float, float]], chip: Chip, source: str) -> FittedParameter:
    """Median of the solutions of the larger half of the measurements ((work, value) pairs)."""
    lo, hi = PARAMETERS[name].bounds
    ranked = sorted(solutions)
    top = [value for _, value in ranked[len(ranked) // 2:]]
    value = median(top)
    spread = (sum((v - value) ** 2 for v in top) / max(1, len(top) - 1)) ** 0.5 / len(top) ** 0.5 if len(top) > 1 else None
    return FittedParameter(name=name, value=round(min(hi, max(lo, value)), 4), prior=prior_value(chip.id, name),
                           bounds=(lo, hi), identified=True, stderr=spread, source=source)


def _positive(row: dict, key: str, what: str) -> float:
    value = row.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise WindtunnelError(f"Probe record: {what} entry {row!r:.120} has {key} {value!r}; it must be a positive "
                              "number.", field=key)
    return float(value)


def _gemm(data: dict, chip: Chip, eff: Efficiency, source: str) -> tuple[list[FittedParameter], dict, int]:
    by_dtype: dict[str, list[tuple[float, float]]] = {}
    for row in data.get("gemm") or []:
        dtype = row.get("dtype")
        if dtype not in ("bf16", "fp16", "fp8") or dtype not in chip.peak_flops:
            continue
        m, n, k = (int(_positive(row, key, "gemm")) for key in ("m", "n", "k"))
        seconds = _positive(row, "seconds", "gemm")
        name = f"gemm.{dtype}"
        lo, hi = PARAMETERS[name].bounds

        def model(v: float, m=m, n=n, k=k, dtype=dtype) -> float:
            return gemm_time(m, n, k, dtype, chip, dataclasses.replace(eff, gemm_max={**eff.gemm_max, dtype: v}))

        by_dtype.setdefault(name, []).append((2.0 * m * n * k, _solve(seconds, model, lo, hi)))
    params = [_summarise(name, rows, chip, source) for name, rows in sorted(by_dtype.items())]
    return params, {name: [round(v, 4) for _, v in sorted(rows)] for name, rows in by_dtype.items()}, \
        sum(len(rows) for rows in by_dtype.values())


def attention_op(batch: int, heads: int, seq_len: int, head_dim: int, kernel: str, backward: bool) -> Op:
    """The cost model's operator for one non-causal SDPA call (forward, or its backward at 2.5x the FLOPs)."""
    scores = float(batch * heads * seq_len * seq_len)
    flops = 4.0 * scores * head_dim * (2.5 if backward else 1.0)
    moved = 4.0 * batch * heads * seq_len * head_dim * ACT_BYTES * (2.0 if backward else 1.0)
    return Op(name="probe.sdpa", kind="attention", flops=flops, bytes_moved=moved,
              shape=(batch * heads, seq_len, seq_len, head_dim), phase="bwd" if backward else "fwd",
              exponentials=scores * (2.0 if backward else 1.0), kernel=kernel)


def _attention(data: dict, chip: Chip, eff: Efficiency, source: str) -> tuple[list[FittedParameter], dict, int]:
    solutions: dict[str, list[tuple[float, float]]] = {}
    for row in data.get("attention") or []:
        kernel = BACKENDS.get(row.get("backend", "flash"))
        if kernel is None:
            continue
        batch, heads, seq_len, head_dim = (int(_positive(row, key, "attention"))
                                           for key in ("batch", "heads", "seq_len", "head_dim"))
        for phase, key in (("fwd", "fwd_s"), ("bwd", "bwd_s")):
            if row.get(key) is None:
                continue
            seconds = _positive(row, key, "attention")
            name = f"attention.{kernel}.{phase}"
            op = attention_op(batch, heads, seq_len, head_dim, kernel, phase == "bwd")
            lo, hi = PARAMETERS[name].bounds

            def model(v: float, op=op, name=name) -> float:
                return attention_time(op, chip, with_value(eff, name, v))

            solutions.setdefault(name, []).append((op.flops, _solve(seconds, model, lo, hi)))
    params = [_summarise(name, rows, chip, source) for name, rows in sorted(solutions.items())]
    return params, {name: [round(v, 4) for _, v in sorted(rows)] for name, rows in solutions.items()}, \
        sum(len(rows) for rows in solutions.values())


def _memory(data: dict, chip: Chip, eff: Efficiency, source: str) -> tuple[list[FittedParameter], dict, int]:
    name = "memory.bandwidth_efficiency"
    lo, hi = PARAMETERS[name].bounds
    rows = []
    for row in data.get("memory") or []:
        size, seconds = _positive(row, "bytes", "memory"), _positive(row, "seconds", "memory")
        op = Op(name="probe.copy", kind="memory", bytes_moved=2.0 * size)

        def model(v: float, op=op) -> float:
            return memory_op_time(op, chip, dataclasses.replace(eff, memory_bandwidth=v))

        rows.append((size, _solve(seconds, model, lo, hi)))
    if not rows:
        return [], {}, 0
    return [_summarise(name, rows, chip, source)], {name: [round(v, 4) for _, v in sorted(rows)]}, len(rows)


def _collectives(data: dict, chip: Chip, source: str):
    from windtunnel.profiling.fit_collectives import fit_collectives

    logs = []
    for index, entry in enumerate(data.get("collectives") or []):
        ranks = int(_positive(entry, "ranks", "collectives"))
        collective = entry.get("collective")
        factor = bus_factor(collective, ranks)
        rows = []
        for line, row in enumerate(entry.get("rows") or [], start=1):
            size, seconds = _positive(row, "size_bytes", "collectives"), _positive(row, "time_s", "collectives")
            rows.append(BenchRow(size, seconds, size / seconds, size / seconds * factor, False, line))
        hosts = int(entry.get("hosts", 1))
        logs.append(BenchLog(f"{source}#collectives[{index}]", "probe", collective, ranks, ranks // hosts, hosts,
                             [str(data.get("device", ""))], rows))
    if not logs:
        return None
    return fit_collectives(logs, chip.id)


def fit_probe(data: dict, chip_id: str | None = None, source: str = "probe") -> ProbeFit:
    """Fit the parameters a probe record measures, on ``chip_id`` (default: the record's chip)."""
    chip_id = chip_id or data.get("chip")
    if chip_id not in chip_names():
        raise WindtunnelError(f"Probe record names chip {chip_id!r}, which is not in the catalog; pass --hardware "
                              f"with one of {choices_text(chip_names())}.", field="hardware")
    chip = load_chip(chip_id)
    eff = efficiency_for(chip)
    source = f"{source}: {data.get('device', '?')}, torch {data.get('torch', '?')}"
    parameters, details, used = [], {}, 0
    for part in (_gemm, _attention, _memory):
        params, detail, rows = part(data, chip, eff, source)
        parameters += params
        details.update({f"solutions.{k}": v for k, v in detail.items()})
        used += rows
    loo = None
    comm = _collectives(data, chip, source)
    if comm is not None:
        parameters += comm.parameters
        used += comm.rows_used
        loo = comm.loo_median_abs_error
        details["collectives"] = comm.fit_stats()
    if not parameters:
        raise WindtunnelError("Probe record holds no usable measurement (gemm, attention, memory or collectives "
                              f"entries for chip '{chip_id}').", field="from_record")
    return ProbeFit(chip.id, parameters, used, loo, details)

