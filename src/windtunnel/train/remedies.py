"""Remedies for a training plan: rule-proposed and locally searched changes, each one simulated.

The rules are data (``catalog/remedies.yaml``): each fires on the verdict (a share above a
threshold, or a plan that does not fit) and proposes plan changes with its rationale; a local
search adds one step along every dimension of the plan space, then further rounds from the best
changes found. Every candidate is played by the same engine as ``train simulate`` and nothing is
shown that was not: for a plan that fits, only changes that fit and are faster; for one that does
not, the changes that make it fit, fastest first, a slower one labelled as the price of fitting.
Each shown remedy's printed plan is simulated again from its text before it is listed
(``verified``). Units: seconds, bytes, tokens/s; ``gain`` is the signed fraction of tokens/s over
the input plan's.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache

from pydantic import ValidationError

from windtunnel.search.backends import LocalBackend
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.plan import Plan, parse_plan
from windtunnel.specs.stack import load_stack, with_stack_defaults
from windtunnel.specs.yamlio import catalog_dir, read_yaml
from windtunnel.train.explain import GIB, resource_seconds, tier_of_kind
from windtunnel.train.result import TrainingResult
from windtunnel.train.step import TrainingJob, simulate

_OPERATOR = re.compile(r"^([x/+\-])([0-9]+)$")
# Plan keys whose value follows another's unless a change sets it (the schedule follows vpp).
_DERIVED = {"schedule": ("1f1b", "interleaved")}
# How an effect names the share it moved (the step's own breakdown: the bubble there includes stage imbalance).
_FOCUS_LABEL = {"bubble": "pipeline idle", "recompute": "recompute", "compute": "compute", "host": "host issue"}
# An effect names the time a change adds when some share grows by more than this fraction of the step.
PRICE_SHARE = 0.02
# For a plan that does not fit, this many one-step changes that make it fit are listed first.
SINGLE_STEP_FITS = 3


@dataclass(frozen=True)
class Rule:
    """One remedy rule: when it fires, the candidate changes it proposes, and why."""

    id: str
    when: dict
    focus: str
    candidates: tuple[dict, ...]
    rationale: str
    numerics: bool = False


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    moves: dict[str, tuple]
    rounds: int
    beam: int
    search_rationale: str


@lru_cache(maxsize=1)
def load_rules() -> RuleSet:
    """The shipped rule set (catalog/remedies.yaml)."""
    doc = read_yaml(catalog_dir("remedies.yaml")) or {}
    fields = set(Plan.model_fields)
    rules = []
    for entry in doc.get("rules") or []:
        for change in entry["try"]:
            unknown = set(change) - fields
            if unknown:
                raise WindtunnelError(f"Remedy rule '{entry['id']}' changes unknown plan key(s) {sorted(unknown)}.")
        rules.append(Rule(id=entry["id"], when=dict(entry.get("when") or {}), focus=str(entry.get("focus", "")),
                          candidates=tuple(dict(c) for c in entry["try"]), rationale=" ".join(entry["rationale"].split()),
                          numerics=bool(entry.get("numerics", False))))
    search = doc.get("local_search") or {}
    return RuleSet(tuple(rules), {k: tuple(v) for k, v in (search.get("moves") or {}).items()},
                   int(search.get("rounds", 1)), int(search.get("beam", 3)), " ".join(search.get("rationale", "").split()))


def matching_share(shares: dict[str, float], pattern: str) -> float:
    """Sum of the shares whose resource name matches the glob ``pattern``."""
    return sum(value for key, value in shares.items() if fnmatch.fnmatchcase(key, pattern))


def fires(rule: Rule, verdict: dict) -> bool:
    """Whether ``rule`` holds for the verdict document."""
    when = rule.when
    if "infeasible" in when and bool(when["infeasible"]) == verdict["feasible"]:
        return False
    share = matching_share(verdict["shares"], when["share"]) if "share" in when else None
    return share is None or share > float(when.get("above", 0.0))


def apply_change(plan: Plan, change: dict) -> Plan | None:
    """``plan`` with ``change`` applied (values set, or ``x2``, ``/2``, ``+1``, ``-1`` on the current value);
    None when an operator does not apply (a divisor that does not divide) or the result is not a plan."""
    # Only the fields the plan sets are carried (the others keep taking the stack's defaults in the engine, as
    # they do when the printed plan is parsed again).
    data = {key: getattr(plan, key) for key in plan.model_fields_set}
    for key, value in change.items():
        match = _OPERATOR.match(value) if isinstance(value, str) else None
        if match:
            current, number = getattr(plan, key), int(match.group(2))
            op = match.group(1)
            if op == "/" and current % number:
                return None
            data[key] = {"x": current * number, "/": current // number, "+": current + number,
                         "-": current - number}[op]
        else:
            data[key] = value
    for key, derived in _DERIVED.items():
        if key not in change and data.get(key) in derived:
            data.pop(key)
    data["dp"] = 0
    try:
        new = Plan(**data)
    except ValidationError:
        return None
    return None if new.to_string() == plan.model_copy(update={"dp": 0}).to_string() else new


def plan_diff(base: Plan, new: Plan) -> str:
    """The keys that differ, as ``vpp 1 -> 4, recompute selective -> full:1`` (full:k recomputes the first k
    layers of each chunk; the schedule as the plan runs it)."""
    out = []
    for key in Plan.model_fields:
        if key == "recompute_layers":
            continue
        before, after = _shown(base, key), _shown(new, key)
        if before != after:
            out.append(f"{key} {before} -> {after}")
    return ", ".join(out)


def _shown(plan: Plan, key: str) -> str:
    if key == "schedule":
        return plan.pipeline_schedule
    value = getattr(plan, key)
    if key == "recompute" and value == "full" and plan.recompute_layers >= 0:
        return f"full:{plan.recompute_layers}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if key == "layout" and not value:
        return "even"  # no layout given: layers split evenly
    return "-" if value is None else str(value)


@dataclass
class Candidate:
    """A simulated change: its plan, result, the rules behind it and the chain of changes from the base."""

    plan: Plan
    result: TrainingResult
    rules: list[str]
    steps: int
    numerics: bool = False
    focus: list[str] = field(default_factory=list)


def _simulate_plan(item: tuple[TrainingJob, Plan]) -> TrainingResult | str:
    """One candidate on the engine (a top-level function, so a process pool can run it); an invalid plan
    comes back as its error message."""
    job, plan = item
    try:
        return simulate(replace(job, plan=plan, keep_trace=False))
    except WindtunnelError as exc:
        return str(exc)


class _Search:
    def __init__(self, job: TrainingJob, base: TrainingResult, backend) -> None:
        self.job = job
        self.base = base
        self.base_plan = parse_plan(base.plan)
        self.backend = backend
        self.seen: dict[str, Candidate | None] = {self.base_plan.model_copy(update={"dp": 0}).to_string(): None}
        self.invalid = 0

    def round(self, parents: list[Candidate | None], moves: list[tuple[dict, str, str, bool]]) -> None:
        """Simulate every move from every parent (each distinct plan once)."""
        pending: dict[str, tuple[Plan, Candidate | None, str, str, bool]] = {}
        for parent in parents:
            start = self.base_plan if parent is None else parent.plan
            for change, rule, focus, numerics in moves:
                plan = apply_change(start, change)
                if plan is None:
                    continue
                key = plan.to_string()
                if key not in self.seen and key not in pending:
                    pending[key] = (plan, parent, rule, focus, numerics)
        results = self.backend.map(_simulate_plan, [(self.job, item[0]) for item in pending.values()])
        for (key, (plan, parent, rule, focus, numerics)), result in zip(pending.items(), results, strict=True):
            if isinstance(result, str):
                self.seen[key] = None
                self.invalid += 1
                continue
            rules = ([*parent.rules] if parent else []) + [rule]
            self.seen[key] = Candidate(plan, result, rules, 1 + (parent.steps if parent else 0),
                                       numerics or bool(parent and parent.numerics),
                                       ([*parent.focus] if parent else []) + ([focus] if focus else []))

    @property
    def candidates(self) -> list[Candidate]:
        return [c for c in self.seen.values() if c is not None and c.result.plan != self.base.plan]


def _moves(rule_set: RuleSet, fired: list[Rule]) -> list[tuple[dict, str, str, bool]]:
    moves = [(change, rule.id, rule.focus, rule.numerics) for rule in fired for change in rule.candidates]
    for key, values in rule_set.moves.items():
        moves += [({key: value}, "local-search", "", False) for value in values]
    return moves


def _beam(candidates: list[Candidate], base_feasible: bool, base_tps: float, width: int) -> list[Candidate]:
    fitting = sorted((c for c in candidates if c.result.feasible), key=lambda c: (-c.result.tokens_per_s, c.result.plan))
    if base_feasible:
        return [c for c in fitting if c.result.tokens_per_s > base_tps][:width]
    if fitting:
        return fitting[:width]
    return sorted(candidates, key=lambda c: (c.result.peak_memory_bytes, c.result.plan))[:width]


def _effect(candidate: Candidate, base: TrainingResult, base_coarse: dict, job: TrainingJob) -> str:
    result = candidate.result
    parts = []
    coarse = resource_seconds(result.breakdown, tier_of_kind(job, result))
    for focus in dict.fromkeys(candidate.focus):
        if focus == "hbm_capacity":
            continue
        before = matching_share({k: v / base.step_time_s for k, v in base_coarse.items()}, focus)
        after = matching_share({k: v / result.step_time_s for k, v in coarse.items()}, focus)
        parts.append(f"{_FOCUS_LABEL.get(focus, focus.replace('*:', '').upper() + ' traffic')} "
                     f"{before:.0%} -> {after:.0%}")
    # What the change costs: the share that grew most, when it grew by more than PRICE_SHARE of the base step.
    growth = {k: coarse.get(k, 0.0) - base_coarse.get(k, 0.0) for k in set(coarse) | set(base_coarse)}
    worst = max(growth, key=lambda k: (growth[k], k)) if growth else None
    if worst is not None and growth[worst] > PRICE_SHARE * base.step_time_s:
        parts.append(f"+{growth[worst]:.2g} s {worst} exposed" if ":" in worst else f"+{growth[worst]:.2g} s {worst}")
    parts.append(f"step {result.step_time_s / base.step_time_s - 1:+.0%}")
    memory = (result.peak_memory_bytes - base.peak_memory_bytes) / GIB
    if result.feasible and not base.feasible:
        parts.append(f"fits ({base.peak_memory_bytes / GIB:.1f} -> {result.peak_memory_bytes / GIB:.1f} GiB)")
    else:
        parts.append(f"memory {memory:+.1f} GiB")
    return ", ".join(parts)


def _dominates(a: Candidate, b: Candidate) -> bool:
    """``a`` makes ``b`` pointless: no more changes, no slower, no more memory, and better in one of them."""
    ka = (a.steps, -a.result.tokens_per_s, a.result.peak_memory_bytes, a.numerics)
    kb = (b.steps, -b.result.tokens_per_s, b.result.peak_memory_bytes, b.numerics)
    return all(x <= y for x, y in zip(ka, kb, strict=True)) and ka != kb


def _verified(job: TrainingJob, candidate: Candidate) -> bool:
    """The printed plan, parsed from its text as `train simulate --plan` does (the stack's defaults for what it
    leaves unset), is exactly the plan that was simulated, so simulating it again gives the same result; where
    it is not, the printed plan is simulated again and must be no slower, with the same memory."""
    printed = with_stack_defaults(parse_plan(candidate.result.plan), load_stack(job.framework))
    simulated = with_stack_defaults(candidate.plan, load_stack(job.framework))

    def canonical(plan: Plan) -> dict:
        return {**plan.model_dump(), "dp": 0, "schedule": plan.pipeline_schedule}

    if canonical(printed) == canonical(simulated):
        return True
    again = _simulate_plan((job, parse_plan(candidate.result.plan)))  # the text loses something: play it again
    return (not isinstance(again, str) and again.step_time_s <= candidate.result.step_time_s
            and again.feasible == candidate.result.feasible
            and again.peak_memory_bytes == candidate.result.peak_memory_bytes)


def find_remedies(job: TrainingJob, verdict: dict, base: TrainingResult, *, top: int = 8,
                  rule_set: RuleSet | None = None, workers: int = 1) -> tuple[list[dict], dict]:
    """Ranked, verified remedies for the plan of ``base`` (the result of ``job``) and the search's counts.
    ``workers``: local processes simulating the candidates (the answer does not depend on it)."""
    rule_set = rule_set or load_rules()
    fired = [rule for rule in rule_set.rules if fires(rule, verdict)]
    by_id = {rule.id: rule for rule in fired}
    moves = _moves(rule_set, fired)
    backend = LocalBackend(workers)
    try:
        search = _Search(job, base, backend)
        parents: list[Candidate | None] = [None]
        for _ in range(max(1, rule_set.rounds)):
            search.round(parents, moves)
            parents = _beam(search.candidates, base.feasible, base.tokens_per_s, rule_set.beam)
            if not parents:
                break
    finally:
        backend.close()
    base_tps = base.tokens_per_s
    shown = [c for c in search.candidates if c.result.feasible
             and (not base.feasible or c.result.tokens_per_s > base_tps * (1 + 1e-9))]
    # Changes that keep the training arithmetic first, then those that alter it (fp8, bf16 states); for a
    # plan that does not fit, the smallest (one-step) changes that make it fit lead, cheapest first.
    shown.sort(key=lambda c: (c.numerics, -c.result.tokens_per_s, c.steps, c.result.plan))
    # A change whose step and memory a simpler (or earlier-ranked) one already gives adds nothing.
    outcomes: dict[tuple, Candidate] = {}
    for candidate in sorted(shown, key=lambda c: (c.steps, c.numerics, c.result.plan)):
        outcomes.setdefault((candidate.result.step_time_s, candidate.result.peak_memory_bytes), candidate)
    kept = set(map(id, outcomes.values()))
    shown = [c for c in shown if id(c) in kept and not any(_dominates(other, c) for other in shown)]
    if not base.feasible:
        single = [c for c in shown if c.steps == 1][:SINGLE_STEP_FITS]
        shown = single + [c for c in shown if c not in single]
    base_coarse = resource_seconds(base.breakdown, tier_of_kind(job, base))
    out = []
    for candidate in shown:
        if len(out) >= top:
            break
        if not _verified(job, candidate):
            continue
        result = candidate.result
        gain = result.tokens_per_s / base_tps - 1.0
        rationale = " ".join(dict.fromkeys(by_id[r].rationale if r in by_id else rule_set.search_rationale
                                           for r in candidate.rules))
        out.append({
            "change": plan_diff(search.base_plan, parse_plan(result.plan)), "plan": result.plan, "feasible": result.feasible,
            "step_time_s": result.step_time_s, "tokens_per_s": result.tokens_per_s, "mfu": result.mfu,
            "peak_memory_bytes": result.peak_memory_bytes, "gain": gain, "verified": True,
            "price_of_fitting": gain < 0, "changes_numerics": candidate.numerics, "rules": candidate.rules,
            "effect": _effect(candidate, base, base_coarse, job), "rationale": rationale,
        })
    stats = {"simulated": sum(1 for c in search.seen.values() if c is not None), "invalid": search.invalid,
             "rules_fired": [rule.id for rule in fired], "rounds": rule_set.rounds, "beam": rule_set.beam}
    return out, stats
