"""Which modules each pipeline stage runs: the even split, or a Megatron pipeline layout string.

A stage's modules are named by kind: ``embedding`` (input lookup), ``dense``/``moe`` (transformer
layers), the multi-token-prediction (MTP) module's pieces ``mtp_embedding``, ``mtp_proj``, a
transformer layer and ``mtp_head``, and ``head`` (final norm, output layer and loss).

Megatron's ``--pipeline-model-parallel-layout`` writes the stages in virtual-pipeline order
(stage ``v`` runs on rank ``v % pp`` as its chunk ``v // pp``), separated by ``|``, with ``E`` the
embedding, ``t`` a transformer layer, ``m`` an MTP module and ``L`` the loss (with the output
layer); ``X*n`` repeats a symbol or a parenthesised group, commas and spaces are cosmetic and a
stage may be empty. Example: DeepSeek-V3 on 16 stages with MTP, ``Et*4|(t*4|)*14tmL``.
"""

from __future__ import annotations

import re
from itertools import accumulate

from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.model import ModelSpec

LAYER_KINDS = ("dense", "moe")
_SYMBOLS = set("EtmL|")


def even_split(kinds: list[str], parts: int) -> list[list[str]]:
    """Split layers over ``parts`` consecutive chunks as evenly as possible (extras go to middle chunks)."""
    base, extra = divmod(len(kinds), parts)
    sizes = [base] * parts
    order = sorted(range(parts), key=lambda i: (abs(i - (parts - 1) / 2), i))
    for i in order[:extra]:
        sizes[i] += 1
    out, start = [], 0
    for size in sizes:
        out.append(kinds[start:start + size])
        start += size
    return out


def _fail(message: str) -> None:
    raise WindtunnelError(message, field="layout")


def expand_layout(text: str) -> list[str]:
    """The stages of a Megatron layout string, each as a string of E/t/m/L symbols."""
    source = re.sub(r"[\s,]", "", text)
    position = 0

    def sequence(depth: int) -> str:
        nonlocal position
        out = []
        while position < len(source):
            char = source[position]
            if char == ")":
                if depth == 0:
                    _fail(f"Plan field 'layout' is '{text}': unmatched ')' at character {position + 1}.")
                return "".join(out)
            if char == "(":
                position += 1
                item = sequence(depth + 1)
                if position >= len(source) or source[position] != ")":
                    _fail(f"Plan field 'layout' is '{text}': a '(' is never closed.")
                position += 1
            elif char in _SYMBOLS:
                item = char
                position += 1
            else:
                _fail(f"Plan field 'layout' is '{text}': '{char}' is not a layout symbol; use E (embedding), "
                      "t (transformer layer), m (MTP module), L (loss and output layer), | between stages, "
                      "X*n to repeat and parentheses to group, e.g. 'Et*4|(t*4|)*14tmL'.")
            match = re.match(r"\*(\d+)", source[position:])
            if match:
                item *= int(match.group(1))
                position += len(match.group(0))
            out.append(item)
        if depth:
            _fail(f"Plan field 'layout' is '{text}': a '(' is never closed.")
        return "".join(out)

    return sequence(0).split("|")


def stage_modules(model: ModelSpec, layout: str, stages: int, mtp: int) -> list[list[str]]:
    """Module kinds per virtual pipeline stage (``stages`` = pp * vpp), from ``layout`` or, when it is
    empty, the even split with the embedding first and the MTP modules and head last."""
    kinds = ["dense"] * model.dense_layers + ["moe"] * model.moe_layers
    mtp_layer = kinds[-1]
    mtp_modules = ["mtp_embedding", "mtp_proj", mtp_layer, "mtp_head"] * mtp
    if not layout:
        split = even_split(kinds, stages)
        split[0] = ["embedding", *split[0]]
        split[-1] = [*split[-1], *mtp_modules, "head"]
        return split
    symbols = expand_layout(layout)
    joined = "".join(symbols)
    if len(symbols) != stages:
        _fail(f"Plan field 'layout' is '{layout}', which has {len(symbols)} stages; the plan has {stages} pipeline "
              "stages (pp*vpp; pp with DualPipe), so the layout needs that many, separated by '|'.")
    if joined.count("t") != model.layers:
        _fail(f"Plan field 'layout' is '{layout}', which places {joined.count('t')} transformer layers (t); the "
              f"model has {model.layers}.")
    if joined.count("m") != mtp:
        _fail(f"Plan field 'layout' is '{layout}', which places {joined.count('m')} MTP modules (m); the plan trains "
              f"{mtp} (plan field 'mtp', default the model's mtp_layers).")
    if not symbols[0].startswith("E") or joined.count("E") != 1:
        _fail(f"Plan field 'layout' is '{layout}': the embedding (E) must appear once, at the start of the first stage.")
    if not symbols[-1].endswith("L") or joined.count("L") != 1:
        _fail(f"Plan field 'layout' is '{layout}': the loss (L) must appear once, at the end of the last stage.")
    if "m" in joined and joined.index("m") < joined.rindex("t"):
        _fail(f"Plan field 'layout' is '{layout}': MTP modules (m) come after every transformer layer (t).")
    out, layer = [], 0
    names = {"E": ["embedding"], "m": ["mtp_embedding", "mtp_proj", mtp_layer, "mtp_head"], "L": ["head"]}
    for stage in symbols:
        modules: list[str] = []
        for symbol in stage:
            if symbol == "t":
                modules.append(kinds[layer])
                layer += 1
            else:
                modules.extend(names[symbol])
        out.append(modules)
    return out


BALANCED = "balanced"


def _stage_symbols(stage: list[str]) -> str:
    """One stage's modules as layout symbols (a run of layers as t*n; an MTP module, layer included, as m)."""
    out, layers, in_mtp = [], 0, False
    for module in stage:
        if in_mtp or module == "mtp_embedding":
            in_mtp = module != "mtp_head"
            if module != "mtp_embedding":
                continue
        if module in LAYER_KINDS:
            layers += 1
            continue
        if layers:
            out.append("t" if layers == 1 else f"t*{layers}")
            layers = 0
        out.append({"embedding": "E", "mtp_embedding": "m", "head": "L"}.get(module, ""))
    if layers:
        out.append("t" if layers == 1 else f"t*{layers}")
    return "".join(out)


def layout_string(stages: list[list[str]]) -> str:
    """The Megatron layout string of a split (module kinds per stage), e.g. 'Et*3|t*4|t*3mL'."""
    return "|".join(_stage_symbols(stage) for stage in stages)


def balanced_split(units: list[list[str]], weights: list[float], stages: int, rank_of,
                   max_layers: int | None = None) -> list[list[str]]:
    """Split ``units`` (the model's modules in order, each an indivisible group: the embedding, one layer, one MTP
    module, the head) into ``stages`` consecutive stages so that the busiest rank's weight (seconds per micro-batch,
    summed over the stages ``rank_of(stage)`` maps to it) is as small as possible; ties go to the split with the
    smaller sum of squared rank loads, then to the earlier boundaries (deterministic).

    First the split that minimises the largest single stage (binary search on the capacity, greedy fill); then, for
    ranks that hold several stages (interleaving, DualPipe's mirrored pairs), boundaries move one unit at a time
    while that lowers the busiest rank. Why: a planner balances the pipeline by hand (Megatron's
    --decoder-first/last-pipeline-num-layers, --pipeline-model-parallel-layout); the even split leaves the stages
    with the embedding, MTP and output layer heavier. ``max_layers``: no stage holds more transformer layers (an
    MTP module counts as one) than this; the caller passes the even split's largest stage, so no stage keeps more
    layers' activations in flight than the even split's fullest one (memory stays within the even split's)."""
    n = len(units)
    layer_count = [sum(m in LAYER_KINDS for m in unit) for unit in units]
    limit = max_layers if max_layers is not None else n
    # Prefix sums: the weight and layer count of units a..b-1 are w_at[b] - w_at[a] and l_at[b] - l_at[a].
    w_at, l_at = [0.0, *accumulate(weights)], [0, *accumulate(layer_count)]
    if stages < 1 or n < stages:
        raise WindtunnelError(f"Plan field 'layout' is 'balanced': {n} modules cannot fill {stages} pipeline stages.",
                              field="layout")

    def greedy(cap: float) -> list[int] | None:
        cuts, load, layers = [], 0.0, 0
        for i, w in enumerate(weights):
            if (load + w > cap or layers + layer_count[i] > limit) and (load > 0 or layers > 0):
                cuts.append(i)
                load, layers = 0.0, 0
            load += w
            layers += layer_count[i]
        return cuts if len(cuts) < stages else None

    if greedy(sum(weights)) is None:
        raise WindtunnelError(f"Plan field 'layout' is 'balanced': {stages} stages of at most {limit} layers cannot "
                              f"hold the model's {sum(layer_count)}.", field="layout")
    lo, hi = max(weights), sum(weights)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if greedy(mid) is not None else (mid, hi)
    cuts = greedy(hi) or []
    while len(cuts) < stages - 1:  # fewer stages used than given: split the heaviest multi-unit stage
        bounds = [0, *cuts, n]
        spans = [(w_at[b] - w_at[a], a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b - a > 1]
        _, a, b = max(spans, key=lambda s: (s[0], -s[1]))
        best = min(range(a + 1, b), key=lambda c: (max(w_at[c] - w_at[a], w_at[b] - w_at[c]), c))
        cuts = sorted([*cuts, best])

    def score(cut_list: list[int]) -> tuple[float, float]:
        bounds = [0, *cut_list, n]
        loads: dict[int, float] = {}
        for s, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
            loads[rank_of(s)] = loads.get(rank_of(s), 0.0) + w_at[b] - w_at[a]
        return max(loads.values()), sum(v * v for v in loads.values())

    current = score(cuts)
    improved = True
    while improved:
        improved = False
        for index in range(len(cuts)):
            for step in (-1, 1):
                trial = list(cuts)
                trial[index] += step
                low = trial[index - 1] if index else 0
                high = trial[index + 1] if index + 1 < len(trial) else n
                if not low < trial[index] < high:
                    continue
                # Only the two stages beside the moved boundary change their layer counts.
                if max(l_at[trial[index]] - l_at[low], l_at[high] - l_at[trial[index]]) > limit:
                    continue
                got = score(trial)
                if got < current:
                    cuts, current, improved = trial, got, True
    bounds = [0, *cuts, n]
    return [[m for unit in units[a:b] for m in unit] for a, b in zip(bounds, bounds[1:], strict=False)]


def balanced_stage_modules(model: ModelSpec, stages: int, mtp: int, seconds, rank_of) -> list[list[str]]:
    """layout=balanced for ``model``: its modules (embedding, layers, each MTP module as one unit, head) split by
    :func:`balanced_split` on ``seconds(kind)`` (a module's forward + backward time per micro-batch), no stage
    holding more layers than the even split's fullest stage."""
    units: list[list[str]] = []
    for kind in stage_modules(model, "", 1, mtp)[0]:  # an MTP module (mtp_embedding .. mtp_head) is one unit
        if units and units[-1][0] == "mtp_embedding" and units[-1][-1] != "mtp_head":
            units[-1].append(kind)
        else:
            units.append([kind])
    even = max(sum(k in LAYER_KINDS for k in stage) for stage in stage_modules(model, "", stages, mtp))
    return balanced_split(units, [sum(seconds(k) for k in unit) for unit in units], stages, rank_of, even)
