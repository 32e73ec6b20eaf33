"""Read a PyTorch profiler (Kineto) chrome trace: device kernels per operator kind and step.

Format (PyTorch ``torch.profiler`` ``export_chrome_trace`` / ``tensorboard_trace_handler``, the Chrome
Trace Event format): a JSON object with ``traceEvents``, a list of events. Complete events have
``ph: "X"``, ``name``, ``ts`` and ``dur`` in microseconds, ``pid``/``tid`` and ``cat``: ``kernel``,
``gpu_memcpy``, ``gpu_memset`` for device work (``args.device``, ``args.stream``, ``args.correlation``),
``cuda_runtime`` / ``cuda_driver`` for the host's launches (the same ``args.correlation`` as the kernel they
launch), ``cpu_op`` for framework ops and ``user_annotation`` for ``record_function`` ranges, among them the
profiler's ``ProfilerStep#N`` (one per ``prof.step()``). Ascend traces written by ``torch_npu.profiler`` use
the same format; their device tasks sit under processes named by ``ph: "M"`` ``process_name`` metadata
(``Ascend Hardware``, ``HCCL``), whose events are taken as device work whatever their ``cat``.

Steps: a kernel belongs to the ``ProfilerStep#`` range that contains the host launch with its correlation id
(or its own start when no launch is recorded); kernels outside every step range (warm-up, the profiler's
flush) are left out. Without step annotations the whole trace is one step unless the caller says how many.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from windtunnel.profiling.kernel_kinds import kernel_kind
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.yamlio import read_json

US = 1.0e-6
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_DEVICE_PROCESSES = ("Ascend Hardware", "HCCL")
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "runtime")


@dataclass
class KindTotal:
    """Kernels of one kind: how many, and their summed duration (s), over the steps used."""

    count: int = 0
    seconds: float = 0.0
    names: dict[str, float] = field(default_factory=dict)


@dataclass
class TraceSummary:
    """Per-kind device time of the steps of one trace, and the device's idle time inside them (s)."""

    path: str
    steps: int
    step_names: list[str]
    device: str | None
    kinds: dict[str, KindTotal]
    busy_s: float
    span_s: float
    gaps_s: list[float] = field(default_factory=list)
    step_kinds: list[dict[str, float]] = field(default_factory=list)  # seconds per kind, step by step

    def step_spread(self, kind: str) -> float | None:
        """Relative standard error of the mean per-step time of ``kind`` over the annotated steps (None
        with fewer than two)."""
        values = [step.get(kind, 0.0) for step in self.step_kinds]
        if len(values) < 2 or not sum(values):
            return None
        mean = sum(values) / len(values)
        variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
        return variance ** 0.5 / mean / len(values) ** 0.5

    def per_step(self, kind: str) -> float:
        """Seconds of ``kind`` kernels in one step (the mean over the steps used)."""
        total = self.kinds.get(kind)
        return total.seconds / self.steps if total else 0.0

    @property
    def idle_per_step_s(self) -> float:
        """Device idle time inside the steps' kernel span, per step (launch gaps, host waits)."""
        return max(0.0, self.span_s - self.busy_s) / self.steps

    @property
    def median_gap_s(self) -> float | None:
        """Median idle time between consecutive kernels of one stream (s): the launch/tail overhead a kernel
        costs beyond its own duration where the host keeps ahead (long waits sit in the upper tail)."""
        if not self.gaps_s:
            return None
        ordered = sorted(self.gaps_s)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0

    @property
    def kernels(self) -> int:
        return sum(total.count for total in self.kinds.values())


def _events(path: Path) -> list[dict]:
    doc = read_json(path)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc if isinstance(doc, list) else None
    if not isinstance(events, list):
        raise WindtunnelError(f"Trace '{path}' has no 'traceEvents' list: expected a PyTorch profiler chrome trace "
                              "(prof.export_chrome_trace or tensorboard_trace_handler output).", field="trace")
    return [event for event in events if isinstance(event, dict)]


def _number(event: dict, key: str, path: Path) -> float:
    value = event.get(key)
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise WindtunnelError(f"Trace '{path}': event '{event.get('name', '?')}' has {key} {value!r}, not a number "
                              "(microseconds).", field="trace") from exc


def read_trace(path: str | Path, device: str | None = None, steps: int | None = None) -> TraceSummary:
    """Summarise the device kernels of a Kineto trace per kind, over its ProfilerStep ranges.

    ``device``: which device's kernels to read when the trace holds several (``args.device``, or the pid).
    ``steps``: the number of steps a trace without ``ProfilerStep#`` annotations covers.
    """
    path = Path(path)
    events = _events(path)
    device_pids = {event.get("pid") for event in events if event.get("ph") == "M" and event.get("name") ==
                   "process_name" and any(p in str((event.get("args") or {}).get("name", "")) for p in _DEVICE_PROCESSES)}
    windows: list[tuple[float, float, str]] = []
    launches: dict[object, float] = {}
    kernels: list[tuple[str, str, float, float, str, object, object]] = []
    for event in events:
        if event.get("ph") != "X":
            continue
        name, cat = str(event.get("name", "")), str(event.get("cat", ""))
        args = event.get("args") or {}
        if _STEP.match(name):
            start = _number(event, "ts", path)
            windows.append((start, start + _number(event, "dur", path), name))
        elif cat in _LAUNCH_CATS and "correlation" in args:
            launches[args["correlation"]] = _number(event, "ts", path)
        elif cat in _DEVICE_CATS or event.get("pid") in device_pids:
            # One torch_npu trace is one rank: its "Ascend Hardware" and "HCCL" processes are one device.
            where = "npu" if event.get("pid") in device_pids else str(args.get("device", event.get("pid")))
            kernels.append((name, cat, _number(event, "ts", path), _number(event, "dur", path), where,
                            args.get("correlation"), args.get("stream", event.get("tid"))))
    devices = sorted({k[4] for k in kernels})
    if not kernels:
        raise WindtunnelError(f"Trace '{path}' holds no device kernels (events with cat 'kernel', 'gpu_memcpy' or "
                              "'gpu_memset'): profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA].",
                              field="trace")
    if device is None and len(devices) > 1:
        raise WindtunnelError(f"Trace '{path}' holds kernels of several devices ({', '.join(devices)}); pass --device "
                              "with the one whose rank the job describes.", field="device")
    chosen = device if device is not None else devices[0]
    if chosen not in devices:
        raise WindtunnelError(f"Trace '{path}' has no kernels on device '{chosen}' (field 'device'); devices in it: "
                              f"{', '.join(devices)}.", field="device")
    windows.sort()
    step_names = [w[2] for w in windows]
    selected = []  # (name, cat, start us, duration us, step index, stream)
    for name, cat, start, duration, where, correlation, stream in kernels:
        if where != chosen:
            continue
        anchor = launches.get(correlation, start) if correlation is not None else start
        step = next((i for i, (lo, hi, _) in enumerate(windows) if lo <= anchor <= hi), None) if windows else 0
        if step is not None:
            selected.append((name, cat, start, duration, step, stream))
    if windows:
        count = len(windows)
        if steps is not None and steps != count:
            raise WindtunnelError(f"Trace '{path}' has {count} ProfilerStep ranges but --steps says {steps}; drop "
                                  "--steps (the annotations decide) or trim the trace.", field="steps")
    else:
        count = steps or 1
    if count < 1:
        raise WindtunnelError(f"Field 'steps' must be a positive integer, got {steps}.", field="steps")
    if not selected:
        raise WindtunnelError(f"Trace '{path}': no kernel of device '{chosen}' was launched inside a ProfilerStep "
                              "range.", field="trace")
    kinds: dict[str, KindTotal] = defaultdict(KindTotal)
    by_step: dict[int, dict[str, float]] = defaultdict(dict)
    for name, cat, _, duration, step, _ in selected:
        kind = kernel_kind(name, cat)
        total = kinds[kind]
        total.count += 1
        total.seconds += duration * US
        total.names[name] = total.names.get(name, 0.0) + duration * US
        by_step[step][kind] = by_step[step].get(kind, 0.0) + duration * US
    busy = span = 0.0
    gaps: list[float] = []
    for step in sorted({k[4] for k in selected}):
        compute = [(s, s + d, stream) for _, cat, s, d, i, stream in selected
                   if i == step and cat not in ("gpu_memcpy", "gpu_memset")]
        if compute:
            busy += _union_seconds([(lo, hi) for lo, hi, _ in compute])
            span += (max(hi for _, hi, _ in compute) - min(lo for lo, _, _ in compute)) * US
            for stream in {c[2] for c in compute}:
                ordered = sorted((lo, hi) for lo, hi, where in compute if where == stream)
                gaps += [(b[0] - a[1]) * US for a, b in zip(ordered, ordered[1:], strict=False) if b[0] >= a[1]]
    step_kinds = [by_step[step] for step in sorted(by_step)] if windows else []
    return TraceSummary(str(path), count, step_names, chosen, dict(sorted(kinds.items())), busy, span, gaps,
                        step_kinds)


def _union_seconds(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of (start us, end us) intervals (concurrent streams counted once)."""
    total = 0.0
    start = end = None
    for lo, hi in sorted(intervals):
        if end is None or lo > end:
            if end is not None:
                total += end - start
            start, end = lo, hi
        else:
            end = max(end, hi)
    if end is not None:
        total += end - start
    return total * US
