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
