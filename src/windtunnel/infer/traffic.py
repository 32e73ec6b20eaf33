"""Serving traffic: arrival processes, length distributions, class mixes, phases, trace replay, closed loop.

String forms (``--traffic``)::

    poisson:rate=20,input=lognormal(2000,0.8),output=lognormal(400,1.0)[,duration=300s|requests=N]
    gamma:rate=20,cv=3,input=uniform(100,4000),output=200
    trace:validation/traces/azure_llm_2023_conv.csv[,speed=2][,requests=N][,start=S][,duration=D]
    trace:validation/traces/mooncake_conversation.jsonl[,...]   (carries prompt block hashes: prefix caching)
    closed:concurrency=64,input=5000,output=500,requests=640

Length distributions: ``N`` or ``fixed(N)``; ``uniform(a,b)`` (integers, inclusive); ``lognormal(mean,sigma)``
(``mean`` is the distribution's mean in tokens, ``sigma`` the standard deviation of the log);
``empirical(trace.csv)`` (samples the trace's ContextTokens for inputs, GeneratedTokens for outputs).
Lengths are at least 1 token. A YAML file can mix request classes and change rate and mix over phases
(quote a distribution inside a ``{...}`` flow mapping: its comma would split the mapping)::

    arrival: gamma        # or poisson (default)
    cv: 2                 # gamma only: coefficient of variation of the inter-arrival times
    classes:
      chat:       {input: "lognormal(1000,0.8)", output: "lognormal(250,0.8)"}
      generation: {input: "lognormal(600,0.6)",  output: "lognormal(1500,0.5)"}
    phases:
      - {duration: 300, rate: 12, mix: {chat: 0.9, generation: 0.1}}
      - {duration: 300, rate: 12, mix: {chat: 0.2, generation: 0.8}}

Times in a string carry their unit (duration=300s, start=1min, think=500ms; a bare number other than 0 is an
error); numbers in a YAML file are seconds. Rates are requests per second, lengths tokens. The same seed gives
the same workload.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from windtunnel.infer.units import parse_bool, parse_float, parse_int, parse_seconds, split_top_level
from windtunnel.specs.bounds import MAX_REQUESTS, MAX_SEQ_LEN
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.yamlio import exists, read_mapping_file

KINDS = ("poisson", "gamma", "trace", "closed")
DISTRIBUTIONS = ("N / fixed(N)", "uniform(a,b)", "lognormal(mean,sigma)", "empirical(trace.csv)")
DEFAULT_DURATION_S = 300.0
TRACE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass
class Workload:
    """Requests to serve.

    Open loop: ``arrival`` holds each request's arrival time (s, non-decreasing). Closed loop
    (``concurrency`` set): ``concurrency`` clients each send their next request ``think_s`` after the
    previous one finishes; ``arrival`` is ignored and requests are issued in index order.
    """

    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    klass: np.ndarray
    class_names: list[str]
    description: str
    concurrency: int | None = None
    think_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    # Per request, the hashes of its prompt's blocks of ``block_tokens`` tokens (a trace that carries them,
    # e.g. Mooncake's): what the prefix cache matches. None: no prefix structure known.
    hashes: list[tuple[int, ...]] | None = None
    block_tokens: int = 512

    @property
    def size(self) -> int:
        return int(self.prompt.shape[0])

    def summary(self) -> dict:
        """Counts, span (s), mean rate (requests/s) and mean lengths (tokens)."""
        span = float(self.arrival[-1] - self.arrival[0]) if self.size > 1 and self.concurrency is None else 0.0
        return {"requests": self.size, "description": self.description,
                "span_s": span, "mean_rate_per_s": (self.size - 1) / span if span > 0 else None,
                "mean_input_tokens": float(self.prompt.mean()) if self.size else 0.0,
                "mean_output_tokens": float(self.output.mean()) if self.size else 0.0,
                "concurrency": self.concurrency, "classes": self.class_names}


# ---- length distributions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Lengths:
    """A length distribution (tokens)."""

    kind: str
    a: float = 0.0
    b: float = 0.0
    path: str = ""
    text: str = ""

    def sample(self, rng: np.random.Generator, n: int, which: str) -> np.ndarray:
        """``n`` lengths (int64, >= 1). ``which`` is 'input' or 'output' (column of an empirical trace)."""
        if n <= 0:
            return np.zeros(0, dtype=np.int64)
        if self.kind == "fixed":
            values = np.full(n, self.a)
        elif self.kind == "uniform":
            values = rng.integers(int(self.a), int(self.b) + 1, size=n)
        elif self.kind == "lognormal":
            mu = math.log(self.a) - self.b ** 2 / 2.0
            values = rng.lognormal(mu, self.b, size=n)
        elif self.kind == "empirical":
            trace = load_trace(self.path)
            pool = trace[1] if which == "input" else trace[2]
            values = pool[rng.integers(0, pool.shape[0], size=n)]
        else:  # pragma: no cover - parse_lengths never builds another kind
            raise WindtunnelError(f"unknown length distribution {self.kind}")
        return np.maximum(1, np.rint(values)).astype(np.int64)

    def mean(self) -> float:
        """Mean length in tokens."""
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return (self.a + self.b) / 2.0
        if self.kind == "lognormal":
            return self.a
        trace = load_trace(self.path)
        return float(trace[1].mean())


_CALL = re.compile(r"^\s*([a-z_]+)\s*\((.*)\)\s*$", re.IGNORECASE)


def parse_lengths(text: object, field_name: str) -> Lengths:
    """Parse a length distribution; a bad one raises an error naming the field and the valid forms."""
    raw = str(text).strip()

    def bad(reason: str) -> WindtunnelError:
        return WindtunnelError(f"Field '{field_name}' is '{raw}': {reason}; valid forms: {', '.join(DISTRIBUTIONS)}.",
                               field=field_name)

    if re.fullmatch(r"[0-9]+(\.0*)?", raw):
        value = int(float(raw))
        if not 1 <= value <= MAX_SEQ_LEN:
            raise bad(f"lengths must be from 1 to {MAX_SEQ_LEN:,} tokens")
        return Lengths("fixed", float(value), text=raw)
    match = _CALL.match(raw)
    if not match:
        raise bad("not a length distribution")
    name, args_text = match.group(1).lower(), match.group(2)
    args = [a.strip() for a in args_text.split(",") if a.strip()]
    if name == "empirical":
        if len(args) != 1:
            raise bad("empirical takes one trace CSV path")
        load_trace(args[0])  # fail early with a clear message
        return Lengths("empirical", path=args[0], text=raw)
    try:
        numbers = [float(a) for a in args]
    except ValueError as exc:
        raise bad("arguments must be numbers") from exc
    if not all(math.isfinite(n) for n in numbers):
        raise bad("arguments must be finite numbers")
    if name in ("fixed", "uniform", "lognormal") and numbers and max(numbers[:2 if name == "uniform" else 1]) > MAX_SEQ_LEN:
        raise bad(f"lengths must be at most {MAX_SEQ_LEN:,} tokens")
    if name == "fixed" and len(numbers) == 1 and numbers[0] >= 1:
        return Lengths("fixed", float(round(numbers[0])), text=raw)
    if name == "uniform" and len(numbers) == 2 and 1 <= numbers[0] <= numbers[1]:
        return Lengths("uniform", numbers[0], numbers[1], text=raw)
    if name == "lognormal" and len(numbers) == 2 and numbers[0] >= 1 and 0 <= numbers[1] <= 5:
        return Lengths("lognormal", numbers[0], numbers[1], text=raw)
    raise bad(f"'{name}' with arguments ({args_text}) is not valid (fixed(N>=1), uniform(1<=a<=b), "
              "lognormal(mean>=1, 0<=sigma<=5))")


# ---- traces ----------------------------------------------------------------------------------------------


@lru_cache(maxsize=8)
def _load_trace_cached(path: str, mtime: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    import pandas as pd

    from windtunnel.specs.bounds import check_file_size

    check_file_size(path, what="Trace")
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise WindtunnelError(f"Cannot read trace '{path}' (field 'traffic'): {exc}.", field="traffic") from exc
    missing = [c for c in TRACE_COLUMNS if c not in frame.columns]
    if missing:
        raise WindtunnelError(f"Trace '{path}' lacks column(s) {', '.join(missing)} (field 'traffic'); expected the Azure "
                              f"format {','.join(TRACE_COLUMNS)}.", field="traffic")
    if frame.empty:
        raise WindtunnelError(f"Trace '{path}' has no requests (field 'traffic').", field="traffic")
    try:
        stamps = pd.to_datetime(frame["TIMESTAMP"], format="ISO8601")
    except (ValueError, TypeError):
        try:
            seconds = frame["TIMESTAMP"].astype(float).to_numpy()
        except ValueError as exc:
            raise WindtunnelError(f"Trace '{path}': column TIMESTAMP holds neither timestamps nor seconds "
                                  "(field 'traffic').", field="traffic") from exc
    else:
        seconds = (stamps - stamps.iloc[0]).dt.total_seconds().to_numpy()
    order = np.argsort(seconds, kind="stable")
    seconds = seconds[order] - seconds[order][0]
    context = frame["ContextTokens"].to_numpy()[order]
    generated = frame["GeneratedTokens"].to_numpy()[order]
    if not (np.isfinite(context).all() and np.isfinite(generated).all()):
        raise WindtunnelError(f"Trace '{path}' has blank or non-numeric token counts (field 'traffic').", field="traffic")
    return (seconds.astype(np.float64), np.maximum(1, context).astype(np.int64),
            np.maximum(1, generated).astype(np.int64))


def load_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival s from the first request, prompt tokens, output tokens) of an Azure-format CSV trace."""
    p = Path(path)
    if not exists(p, "file"):
        raise WindtunnelError(f"Trace file not found: '{p}' (field 'traffic').", field="traffic")
    return _load_trace_cached(str(p.resolve()), p.stat().st_mtime)


# ---- arrival processes ----------------------------------------------------------------------------------


def _arrivals(rng: np.random.Generator, process: str, rate: float, cv: float, start: float, duration: float | None,
              count: int | None) -> np.ndarray:
    """Arrival times of a renewal process at ``rate`` (req/s) in [start, start+duration) or the first ``count``."""
    if rate <= 0:
        return np.zeros(0)
    shape = 1.0 / cv ** 2 if process == "gamma" else 1.0

    def gaps(n: int) -> np.ndarray:
        if process == "gamma":
            return rng.gamma(shape, 1.0 / (rate * shape), size=n)
        return rng.exponential(1.0 / rate, size=n)

    if count is not None:
        return start + np.cumsum(gaps(count))
    expected = rate * duration
    if not expected <= MAX_REQUESTS:  # NaN or inf too
        raise WindtunnelError(f"Traffic of {rate:g} requests/s for {duration:g} s is about {expected:.3g} requests; "
                              f"a serving simulation plays at most {MAX_REQUESTS:,}: lower 'rate' or 'duration' (or "
                              "give 'requests').", field="rate")
    n = int(expected + 6.0 * math.sqrt(expected + 1) * max(1.0, cv) + 16)
    times = start + np.cumsum(gaps(n))
    while times[-1] < start + duration:
        times = np.concatenate([times, times[-1] + np.cumsum(gaps(n))])
    return times[times < start + duration]


# ---- specs ------------------------------------------------------------------------------------------------


@dataclass
class ClassSpec:
    name: str
    input: Lengths
    output: Lengths
    weight: float = 1.0


@dataclass
class Phase:
    duration: float | None
    rate: float
    mix: dict[str, float]
    requests: int | None = None


def _traffic_error(text: str, reason: str) -> WindtunnelError:
    return WindtunnelError(
        f"Traffic '{text}' (field 'traffic'): {reason}. Valid kinds: {', '.join(KINDS)}, or a YAML file; e.g. "
        "'poisson:rate=20,input=lognormal(2000,0.8),output=lognormal(400,1.0)' or "
        "'trace:validation/traces/azure_llm_2023_conv.csv'.", field="traffic")


def _key_values(text: str, body: str) -> dict[str, str]:
    values = {}
    for item in split_top_level(body, ","):
        if "=" not in item:
            raise _traffic_error(text, f"item '{item}' is not key=value")
        key, value = item.split("=", 1)
        values[key.strip().lower()] = value.strip()
    return values


def _check_keys(text: str, values: dict, allowed: tuple[str, ...]) -> None:
    unknown = [k for k in values if k not in allowed]
    if unknown:
        raise WindtunnelError(f"Traffic '{text}': unknown key '{unknown[0]}' (field '{unknown[0]}'); valid keys: "
                              f"{', '.join(allowed)}.", field=unknown[0])


def parse_traffic(spec: str | Path | dict, *, seed: int = 0) -> Workload:
    """Build the workload of a traffic spec (string, YAML path or mapping) with ``seed``."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise WindtunnelError(f"Field 'seed' is {seed!r}; give a whole number from 0 to 2^63 - 1.", field="seed")
    if isinstance(spec, dict):
        return _from_mapping(spec, "Traffic", seed)
    text = str(spec).strip()
    found = read_mapping_file(text, what="Traffic", field="traffic", expected="(classes, phases, arrival, ...)")
    if found is not None:
        doc, path = found
        return _from_mapping(doc, f"Traffic file '{path}'", seed, base=path.parent)
    if ":" not in text:
        raise _traffic_error(text, "no kind given (write KIND:key=value,...)")
    kind, body = text.split(":", 1)
    kind = kind.strip().lower()
    rng = np.random.default_rng(seed)
    if kind == "trace":
        parts = split_top_level(body, ",")
        if not parts:
            raise _traffic_error(text, "trace needs a CSV path")
        values = _key_values(text, ",".join(parts[1:]))
        _check_keys(text, values, ("speed", "time_scale", "requests", "start", "duration"))
        return _trace_workload(parts[0], values, text)
    if kind not in KINDS:
        raise _traffic_error(text, f"unknown kind '{kind}'")
    values = _key_values(text, body)
    if kind == "closed":
        _check_keys(text, values, ("concurrency", "input", "output", "requests", "think"))
        for required in ("concurrency", "input", "output"):
            if required not in values:
                raise WindtunnelError(f"Traffic '{text}': closed loop needs '{required}' (field '{required}').",
                                      field=required)
        concurrency = parse_int(values["concurrency"], "concurrency")
        requests = parse_int(values.get("requests", 10 * concurrency), "requests")
        cls = ClassSpec("default", parse_lengths(values["input"], "input"), parse_lengths(values["output"], "output"))
        prompt = cls.input.sample(rng, requests, "input")
        output = cls.output.sample(rng, requests, "output")
        return Workload(np.zeros(requests), prompt, output, np.zeros(requests, dtype=np.int64), ["default"], text,
                        concurrency=concurrency, think_s=parse_seconds(values.get("think", 0), "think", high=86400.0))
    _check_keys(text, values, ("rate", "cv", "input", "output", "duration", "requests"))
    for required in ("rate", "input", "output"):
        if required not in values:
            raise WindtunnelError(f"Traffic '{text}': {kind} arrivals need '{required}' (field '{required}').",
                                  field=required)
    rate = parse_float(values["rate"], "rate", low=0.0, low_open=True)
    cv = parse_float(values.get("cv", 1.0), "cv", low=0.05, high=20.0)
    if kind == "poisson" and "cv" in values:
        raise WindtunnelError(f"Traffic '{text}': 'cv' applies to gamma arrivals only (field 'cv').", field="cv")
    cls = ClassSpec("default", parse_lengths(values["input"], "input"), parse_lengths(values["output"], "output"))
    requests = parse_int(values["requests"], "requests") if "requests" in values else None
    duration = parse_seconds(values["duration"], "duration") if "duration" in values else None
    if requests is None and duration is None:
        duration = DEFAULT_DURATION_S
    phase = Phase(duration=duration, rate=rate, mix={"default": 1.0}, requests=requests)
    return _generate(rng, kind, cv, {"default": cls}, [phase], text)


def _trace_workload(path_text: str, values: dict, text: str) -> Workload:
    hashes = None
    if str(path_text).endswith(".jsonl"):  # Mooncake format: prompt block hashes for the prefix cache
        from windtunnel.infer.prefix_trace import load_hashed_trace

        arrival, prompt, output, hashes = load_hashed_trace(path_text)
    else:
        arrival, prompt, output = load_trace(path_text)
    notes = []
    speed = parse_float(values.get("speed", 1.0), "speed", low=0.0, low_open=True)
    if "time_scale" in values:
        speed /= parse_float(values["time_scale"], "time_scale", low=0.0, low_open=True)
    start = parse_seconds(values.get("start", 0), "start")
    keep = arrival >= start
    if "duration" in values:
        keep &= arrival < start + parse_seconds(values["duration"], "duration")
    index = np.flatnonzero(keep)
    if "requests" in values:
        index = index[:parse_int(values["requests"], "requests")]
    arrival, prompt, output = arrival[index] - start, prompt[index], output[index]
    if arrival.size == 0:
        raise WindtunnelError(f"Traffic '{text}' selects no requests (field 'start'/'duration'/'requests').",
                              field="traffic")
    if speed != 1.0:
        notes.append(f"trace replayed {speed:g}x as fast (arrival times divided by {speed:g})")
    return Workload(arrival / speed, prompt.copy(), output.copy(), np.zeros(arrival.size, dtype=np.int64), ["trace"],
                    text, notes=notes, hashes=None if hashes is None else [hashes[i] for i in index])


def _generate(rng: np.random.Generator, process: str, cv: float, classes: dict[str, ClassSpec], phases: list[Phase],
              text: str) -> Workload:
    names = list(classes)
    arrivals, kinds = [], []
    start = 0.0
    for phase in phases:
        times = _arrivals(rng, process, phase.rate, cv, start, phase.duration, phase.requests)
        weights = np.array([phase.mix.get(n, 0.0) for n in names], dtype=float)
        weights = weights / weights.sum()
        kinds.append(rng.choice(len(names), size=times.size, p=weights) if len(names) > 1
                     else np.zeros(times.size, dtype=np.int64))
        arrivals.append(times)
        start = start + phase.duration if phase.duration is not None else (float(times[-1]) if times.size else start)
    arrival = np.concatenate(arrivals) if arrivals else np.zeros(0)
    klass = np.concatenate(kinds).astype(np.int64) if kinds else np.zeros(0, dtype=np.int64)
    if arrival.size == 0:
        raise WindtunnelError(f"Traffic '{text}' generates no requests (rate x duration too small; field 'rate').",
                              field="rate")
    prompt = np.zeros(arrival.size, dtype=np.int64)
    output = np.zeros(arrival.size, dtype=np.int64)
    for index, name in enumerate(names):
        mask = klass == index
        count = int(mask.sum())
        prompt[mask] = classes[name].input.sample(rng, count, "input")
        output[mask] = classes[name].output.sample(rng, count, "output")
    return Workload(arrival, prompt, output, klass, names, text)


def _from_mapping(doc: dict, where: str, seed: int, base: Path | None = None) -> Workload:
    allowed = ("arrival", "process", "cv", "rate", "duration", "requests", "classes", "phases", "input", "output",
               "trace", "speed", "time_scale", "start", "closed", "concurrency", "think", "seed")
    unknown = [k for k in doc if k not in allowed]
    if unknown:
        raise WindtunnelError(f"{where}: unknown field '{unknown[0]}'; valid fields: {', '.join(allowed)}.",
                              field=str(unknown[0]))
    if "seed" in doc:
        seed = parse_int(doc["seed"], "seed", minimum=0)
    rng = np.random.default_rng(seed)
    if "trace" in doc:
        trace_path = Path(str(doc["trace"]))
        if base is not None and not trace_path.exists() and (base / trace_path).exists():
            trace_path = base / trace_path
        values = {k: str(doc[k]) for k in ("speed", "time_scale", "requests", "start", "duration") if k in doc}
        return _trace_workload(str(trace_path), values, f"{where} (trace {trace_path})")
    process = str(doc.get("arrival", doc.get("process", "poisson"))).lower()
    closed = parse_bool(doc.get("closed", False), "closed") or "concurrency" in doc
    if not closed and process not in ("poisson", "gamma"):
        raise WindtunnelError(f"{where}: field 'arrival' is '{process}'; valid: poisson, gamma.", field="arrival")
    cv = parse_float(doc.get("cv", 1.0), "cv", low=0.05, high=20.0)
    raw_classes = doc.get("classes")
    if raw_classes is None:
        if "input" not in doc or "output" not in doc:
            raise WindtunnelError(f"{where}: give 'classes' (name -> input, output, weight) or 'input' and 'output'.",
                                  field="classes")
        raw_classes = {"default": {"input": doc["input"], "output": doc["output"]}}
    if not isinstance(raw_classes, dict) or not raw_classes:
        raise WindtunnelError(f"{where}: field 'classes' must map class names to {{input, output, weight}}.",
                              field="classes")
    classes = {}
    for name, body in raw_classes.items():
        if not isinstance(body, dict) or "input" not in body or "output" not in body:
            raise WindtunnelError(f"{where}: class '{name}' needs 'input' and 'output' length distributions "
                                  f"(field 'classes.{name}').", field=f"classes.{name}")
        extra = [k for k in body if k not in ("input", "output", "weight")]
        if extra:
            hint = (" (a distribution with a comma inside {...} must be quoted: input: \"lognormal(1000,0.8)\")"
                    if str(extra[0]).rstrip().endswith(")") else "")
            raise WindtunnelError(f"{where}: class '{name}' has unknown field '{extra[0]}'; valid: input, output, "
                                  f"weight{hint}.", field=f"classes.{name}.{extra[0]}")
        classes[str(name)] = ClassSpec(str(name), parse_lengths(body["input"], f"classes.{name}.input"),
                                       parse_lengths(body["output"], f"classes.{name}.output"),
                                       parse_float(body.get("weight", 1.0), f"classes.{name}.weight", low=0.0))
    default_mix = {n: c.weight for n, c in classes.items()}
    if sum(default_mix.values()) <= 0:
        raise WindtunnelError(f"{where}: class weights sum to zero (field 'classes.*.weight').", field="weight")
    if closed:
        concurrency = parse_int(doc.get("concurrency"), "concurrency")
        requests = parse_int(doc.get("requests", 10 * concurrency), "requests")
        names = list(classes)
        weights = np.array([default_mix[n] for n in names], dtype=float)
        klass = rng.choice(len(names), size=requests, p=weights / weights.sum()) if len(names) > 1 else \
            np.zeros(requests, dtype=np.int64)
        prompt = np.zeros(requests, dtype=np.int64)
        output = np.zeros(requests, dtype=np.int64)
        for index, name in enumerate(names):
            mask = klass == index
            prompt[mask] = classes[name].input.sample(rng, int(mask.sum()), "input")
            output[mask] = classes[name].output.sample(rng, int(mask.sum()), "output")
        return Workload(np.zeros(requests), prompt, output, klass.astype(np.int64), names, where, concurrency=concurrency,
                        think_s=parse_seconds(doc.get("think", 0), "think", high=86400.0))
    phases = []
    raw_phases = doc.get("phases")
    if raw_phases is None:
        if "rate" not in doc:
            raise WindtunnelError(f"{where}: give 'rate' (requests/s) or 'phases'.", field="rate")
        requests = parse_int(doc["requests"], "requests") if "requests" in doc else None
        duration = parse_seconds(doc["duration"], "duration") if "duration" in doc else (
            None if requests else DEFAULT_DURATION_S)
        phases.append(Phase(duration, parse_float(doc["rate"], "rate", low=0.0, low_open=True), default_mix, requests))
    else:
        if not isinstance(raw_phases, list) or not raw_phases:
            raise WindtunnelError(f"{where}: field 'phases' must be a non-empty list of {{duration, rate, mix}}.",
                                  field="phases")
        for index, phase in enumerate(raw_phases):
            if not isinstance(phase, dict) or "duration" not in phase:
                raise WindtunnelError(f"{where}: phase {index} needs a 'duration' (field 'phases[{index}].duration').",
                                      field=f"phases[{index}].duration")
            rate = parse_float(phase.get("rate", doc.get("rate")), f"phases[{index}].rate", low=0.0)
            mix = phase.get("mix", default_mix)
            if not isinstance(mix, dict) or any(k not in classes for k in mix):
                raise WindtunnelError(f"{where}: phase {index} mix {mix!r} must map class names ({', '.join(classes)}) "
                                      f"to weights (field 'phases[{index}].mix').", field=f"phases[{index}].mix")
            mix = {str(k): parse_float(v, f"phases[{index}].mix.{k}", low=0.0) for k, v in mix.items()}
            if sum(mix.values()) <= 0:
                raise WindtunnelError(f"{where}: phase {index} mix weights sum to zero.", field=f"phases[{index}].mix")
            phases.append(Phase(parse_seconds(phase["duration"], f"phases[{index}].duration"), rate, mix))
    return _generate(rng, process, cv, classes, phases, where)
