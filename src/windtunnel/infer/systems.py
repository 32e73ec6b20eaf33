"""Serving systems' behaviour as catalog data (catalog/deployments/serving.yaml ``systems``).

What differs between serving systems - the KV-cache precision their engines are built with, their in-flight
scheduler, whether their MoE layers overlap communication with compute, which expert-GEMM kernel class they
run - is looked up here by the system's name, never by searching a row's free text.

Lookup rule (stated, deterministic):

* the *name* is the system text without its parenthesised details ("TensorRT-LLM 0.9.0 (gptSessionBenchmark
  static batching)" -> "TensorRT-LLM 0.9.0"); the *options* are those details split at ``;`` and ``,``
  ("PD-disaggregated; DeepEP normal mode, DeepGEMM, two-batch overlap, EPLB" -> five options);
* every catalog entry whose name equals the name, or is a prefix of it ending where the name continues with a
  space or a ``.`` ("TensorRT-LLM" and "TensorRT-LLM 0.9" both match "TensorRT-LLM 0.9.0"), applies; shorter
  (more general) entries first, so a longer entry's keys win; an entry's ``backend`` (another entry's name)
  applies before the entry itself (NVIDIA NIM runs TensorRT-LLM engines);
* an option applies the settings the matched entries list for it under ``options`` when it equals one of their
  option phrases (whole, case-insensitive); other options change nothing;
* a system no entry matches is *unknown*: it gets ``system_defaults`` (catalog) and the validation report
  lists it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from windtunnel.infer.deployment import serving_defaults
from windtunnel.specs.yamlio import deep_merge

SETTINGS = ("kv_precision", "scheduler", "two_batch_overlap", "moe_gemm", "moe_imbalance", "decode_attention")


def system_name(text: str | None) -> str:
    """The serving system's name without the parenthesised details ('' when none is given)."""
    return (text or "").split("(")[0].strip()


def system_options(text: str | None) -> tuple[str, ...]:
    """The parenthesised details of a serving system's text, split at ';' and ',' (lower case, stripped)."""
    text = text or ""
    if "(" not in text:
        return ()
    inner = text.split("(", 1)[1].rsplit(")", 1)[0]
    return tuple(p.strip().lower() for p in re.split(r"[;,]", inner) if p.strip())


def _matches(entry: str, name: str) -> bool:
    if name == entry:
        return True
    return name.startswith(entry) and name[len(entry)] in " ."


@dataclass(frozen=True)
class ServingSystem:
    """A serving system's settings after the lookup rule (module docstring). ``entries`` are the catalog
    entries that applied, in order; ``options`` the stated options that changed a setting; ``origin`` says for
    each setting where it came from ('system_defaults', an entry's name, or "option '<phrase>'")."""

    name: str
    known: bool
    entries: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    settings: dict = field(default_factory=dict)
    origin: dict = field(default_factory=dict)

    def get(self, key: str, default=None):
        return self.settings.get(key, default)

    def kv_precision(self, precision: str, arch: str) -> tuple[str, str]:
        """(KV precision, why) of engines built at weight ``precision`` for an ``arch`` ('dense'/'moe') model."""
        table = self.settings.get("kv_precision") or {}
        rules = table.get(precision) or table.get("any") or {}
        rule = rules.get(arch) or rules.get("any") or {}
        if not rule:
            fallback = (serving_defaults().get("system_defaults") or {}).get("kv_precision") or {}
            rule = (fallback.get("any") or {}).get("any") or {"kv": "bf16", "note": ""}
        return str(rule["kv"]), str(rule.get("note", ""))

    def scheduler(self) -> dict:
        """The system's in-flight scheduler: batching (None = the catalog default), admission, max_tokens, note."""
        return dict(self.settings.get("scheduler") or {})


def _merge(into: dict, entry: dict, origin: dict, where: str) -> None:
    for key in SETTINGS:
        if key in entry:
            old, new = into.get(key), entry[key]
            into[key] = deep_merge(old, new) if isinstance(old, dict) and isinstance(new, dict) else new
            origin[key] = where


def lookup_system(text: str | None) -> ServingSystem:
    """The serving system named by ``text`` (a row's ``serving_system`` or a bare name), by the module's rule."""
    name = system_name(text)
    catalog = serving_defaults().get("systems") or {}
    settings: dict = {}
    origin: dict = {}
    _merge(settings, serving_defaults().get("system_defaults") or {}, origin, "system_defaults")
    matched = sorted((str(e) for e in catalog if name and _matches(str(e), name)), key=len)
    applied: list[str] = []

    def apply(entry_name: str, seen: tuple[str, ...] = ()) -> None:
        entry = catalog.get(entry_name) or {}
        backend = entry.get("backend")
        if backend and backend in catalog and backend not in seen:
            apply(str(backend), seen + (entry_name,))
        _merge(settings, entry, origin, f"entry '{entry_name}'")
        applied.append(entry_name)

    for entry_name in matched:
        apply(entry_name)
    used = []
    option_table: dict = {}
    for entry_name in applied:
        for phrase, values in ((catalog.get(entry_name) or {}).get("options") or {}).items():
            option_table[str(phrase).strip().lower()] = values or {}
    for option in system_options(text):
        if option in option_table:
            _merge(settings, option_table[option], origin, f"option '{option}'")
            used.append(option)
    return ServingSystem(name or "unknown", bool(matched), tuple(applied), tuple(used), settings, origin)
