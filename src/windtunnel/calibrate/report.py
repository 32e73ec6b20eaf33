"""Training validation with calibration profiles: every row predicted before (the shipped calibration)
and after (its chip's profile overlaid), and the error on the rows the profiles were not fitted on."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from windtunnel.profile import Profile, check_applies, fitted_override, load_profile
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.stack import DEFAULT_STACK
from windtunnel.validation.rows import RowResult
from windtunnel.validation.training import summarize, validate_rows


@dataclass
class Compared:
    """One row before and after its profile (``profile`` is the profile's path, or None where no
    profile applies to the row's chip and stack); ``held_out``: the profile was not fitted on it."""

    before: RowResult
    after: RowResult
    profile: str | None
    held_out: bool

    def as_dict(self) -> dict:
        return {**self.after.as_dict(), "predicted_before": self.before.predicted, "error_before": self.before.error,
                "profile": self.profile, "held_out": self.held_out}


@dataclass
class Comparison:
    """All rows before and after, and the held-out error summary."""

    rows: list[Compared]
    profiles: list[dict] = field(default_factory=list)

    def held_out(self) -> list[Compared]:
        """Rows a profile applied to and was not fitted on, with predictions before and after."""
        return [c for c in self.rows if c.profile and c.held_out and c.before.error is not None
                and c.after.error is not None]

    def summary(self) -> dict:
        held = self.held_out()

        def median(values):
            return statistics.median(values) if values else None

        before = median([abs(c.before.error) for c in held])
        after = median([abs(c.after.error) for c in held])
        return {"n_held_out": len(held), "held_out_ids": [c.after.id for c in held],
                "median_abs_error_before": before, "median_abs_error_after": after,
                "ratio_after_before": (after / before) if before and after is not None else None}

    def as_json(self) -> dict:
        return {"rows": [c.as_dict() for c in self.rows], "summary": summarize([c.after for c in self.rows]),
                "summary_before": summarize([c.before for c in self.rows]), "profiles": self.profiles,
                **self.summary()}


def _stack_of(row: dict) -> str:
    return (row.get("framework") or "").strip() or DEFAULT_STACK


def _applies(profile: Profile, row: dict) -> bool:
    try:
        check_applies(profile, row.get("hardware", ""), _stack_of(row))
    except WindtunnelError:
        return False
    return True


def compare_rows(rows: list[dict], profiles: list[tuple[str, Profile]]) -> Comparison:
    """Predict ``rows`` without and with ``profiles`` (path, profile); each row takes the first profile
    of its chip and stack family. Two profiles of one chip and stack family are an error."""
    seen: dict[tuple[str, str | None], str] = {}
    for path, profile in profiles:
        key = (profile.chip, profile.stack)
        if key in seen:
            raise WindtunnelError(f"Profiles '{seen[key]}' and '{path}' are both of chip '{profile.chip}'"
                                  + (f" and stack '{profile.stack}'" if profile.stack else "")
                                  + "; give one profile per chip and stack.", field="profile")
        seen[key] = path
    before = validate_rows(rows, shipped_roles=False)  # the same split as the profiles' own fit
    after_by_id: dict[str, RowResult] = {}
    chosen: dict[str, tuple[str, Profile]] = {}
    for path, profile in profiles:
        mine = {r["id"] for r in rows if r["id"] not in chosen and _applies(profile, r)}
        chosen.update(dict.fromkeys(mine, (path, profile)))
        if mine:
            for result in validate_rows(rows, fitted_override=fitted_override(profile), only=mine):
                result.assumptions.append(f"profile '{path}' applied (chip {profile.chip})")
                after_by_id[result.id] = result
    compared = []
    for result in before:
        path, profile = chosen.get(result.id, (None, None))
        used = set(profile.fit.get("rows_used") or []) if profile else set()
        compared.append(Compared(result, after_by_id.get(result.id, result), path, result.id not in used))
    described = [{"path": path, "chip": p.chip, "stack": p.stack, "applied": p.identified(),
                  "rows_used": p.fit.get("rows_used", [])} for path, p in profiles]
    return Comparison(compared, described)


def load_profiles(paths: list[Path]) -> list[tuple[str, Profile]]:
    """(path, profile) of each --profile path."""
    return [(str(path), load_profile(path)) for path in paths]


def print_comparison(comparison: Comparison, console, title: str) -> None:
    """The before/after table and the held-out summary line."""
    from rich import box
    from rich.table import Table

    from windtunnel.validation.rows import apct, num, pct

    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)  # fits 80 columns
    for column in ("id", "devices", "measured", "before", "error before", "after", "error after", "profile"):
        table.add_column(column, no_wrap=column in ("id", "profile"),
                         justify="left" if column in ("id", "profile") else "right")
    for c in comparison.rows:
        table.add_row(c.after.id, str(c.after.devices or ""), num(c.after.measured), num(c.before.predicted),
                      pct(c.before.error), num(c.after.predicted), pct(c.after.error),
                      ("" if c.profile is None else ("held out" if c.held_out else "fitted on")))
    console.print(table)
    s = comparison.summary()
    console.print(f"rows a profile applied to and was not fitted on: {s['n_held_out']}; median |error| before "
                  f"{apct(s['median_abs_error_before']) or 'n/a'}, after {apct(s['median_abs_error_after']) or 'n/a'}")
