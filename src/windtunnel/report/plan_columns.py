"""Ranked plans in 80 columns: each plan split into one column per plan key that differs between the rows
(what all rows share goes to a footer line), short headers explained in a footer, one line per plan."""

from __future__ import annotations

from rich import box
from rich.table import Table

GIB = float(2**30)
# Short column headers of plan keys (explained in the footer when used); flags share one 'flags' column.
KEY_HEADERS = {"recompute": "rc", "zero": "zero", "schedule": "sched", "precision": "prec", "cuda_graphs": "graphs",
               "order": "ord", "dispatcher": "disp", "offload_layers": "offl", "recompute_modules": "rc mods",
               "offload_optimizer": "offopt"}
FLAG_SHORT = {"sp": "sp", "tp_overlap": "ovl", "ep_overlap": "epo", "dualpipe": "dualpipe",
              "reuse_fp32_param": "reuse32", "swap_optimizer": "swapopt",
              "act_fp8_store": "act8"}
VALUE_SHORT = {"selective": "sel"}
CATEGORY_SHORT = {"recompute": "rc", "pp_bubble": "bubble", "host_overhead": "host", "optimizer": "opt"}


def plan_items(plan: str) -> dict[str, str]:
    """A plan string as ordered {key: value} of its compact form (Plan.short); flags have value 'on'."""
    from windtunnel.specs.errors import WindtunnelError
    from windtunnel.specs.plan import parse_plan

    try:
        text = parse_plan(plan).short()
    except (WindtunnelError, ValueError):
        text = plan
    items: dict[str, str] = {}
    for part in text.split(","):
        if not part:
            continue
        key, _, value = part.partition("=")
        if not value or value in ("true", "false"):
            items[key] = "on" if value in ("", "true") else "off"
        else:
            items[key] = value
    return items


def _default(key: str) -> str:
    """A plan key's value when its compact form leaves it out (the Plan default), '-' for a non-field."""
    from windtunnel.specs.plan import Plan

    field = Plan.model_fields.get(key)
    return "-" if field is None or field.default is None else str(field.default)


def _value(key: str, value: str) -> str:
    if key == "order":  # tp-cp-dp-pp -> tcdp (innermost first)
        return "".join(part[0] for part in value.split("-"))
    return VALUE_SHORT.get(value, value)


def _category(name: str) -> str:
    return CATEGORY_SHORT.get(name, name.removesuffix("_comm"))


def narrow_plan_table(title: str, rows: list[dict]) -> tuple[Table, list[str]]:
    """The rich table of ranked plan rows (keys as in ``train search --json``) and its footer lines."""
    parsed = [plan_items(r["plan"]) for r in rows]
    keys: list[str] = []
    for items in parsed:
        keys += [k for k in items if k not in keys]
    flags = [k for k in keys if all(items.get(k, "off") in ("on", "off") for items in parsed)]
    varying = [k for k in keys if len({items.get(k, "off" if k in flags else "-") for items in parsed}) > 1]
    common = [k for k in keys if k not in varying]
    shown = [k for k in varying if k not in flags]
    shown_flags = [k for k in varying if k in flags]
    headers = ["#", *(KEY_HEADERS.get(k, k) for k in shown), *(["flags"] if shown_flags else []),
               "step s", "tok/s", "MFU", "peak", "free", "overhead"]
    body = []
    for row, items in zip(rows, parsed, strict=True):
        others = {k: v for k, v in row.get("breakdown", {}).items() if k != "compute"}
        top = max(others.items(), key=lambda kv: kv[1]) if others else None
        cells = [str(row["rank"])] + [_value(k, items.get(k, _default(k))) for k in shown]
        if shown_flags:
            cells.append("+".join(FLAG_SHORT.get(k, k) for k in shown_flags if items.get(k) == "on") or "-")
        cells += [f"{row['step_time_s']:.3f}", f"{row['tokens_per_s']:,.0f}", f"{row['mfu']:.1%}",
                  f"{row['peak_memory_bytes'] / GIB:.1f}", f"{row['memory_headroom_bytes'] / GIB:.1f}",
                  f"{_category(top[0])} {top[1] / row['step_time_s']:.0%}" if top else "-"]
        body.append(cells)
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0))
    numeric = {"#", "step s", "tok/s", "MFU", "peak", "free"}
    for index, header in enumerate(headers):
        width = max([len(header), *(len(cells[index]) for cells in body)])
        table.add_column(header, justify="right" if header in numeric else "left", no_wrap=True, min_width=width)
    for cells in body:
        table.add_row(*cells)
    footer = []
    shared = [k if k in flags else f"{k}={parsed[0][k]}" for k in common if parsed and parsed[0].get(k, "off") != "off"]
    if shared:
        footer.append("every plan: " + ",".join(shared))
    used = [f"{KEY_HEADERS[k]} = {k}" for k in shown if KEY_HEADERS.get(k, k) != k and k != "order"]
    used += [f"{FLAG_SHORT.get(k, k)} = {k}" for k in shown_flags if FLAG_SHORT.get(k, k) != k]
    if any(VALUE_SHORT.get(items.get(k, "")) for items in parsed for k in shown):
        used += [f"{short} = {long}" for long, short in VALUE_SHORT.items()]
    if "order" in shown:
        used.append("ord: rank order, innermost first (t tp, c cp, d dp, p pp)")
    footer.append("; ".join([*used, "step s: step time (s); tok/s: tokens per second; MFU: model FLOPs utilisation; "
                             "peak / free: peak memory / headroom per device (GiB); overhead: largest "
                             "non-compute share of the step (rc recompute, opt optimizer; --wide: full plans)"]))
    if rows:
        footer.append(f"best plan (for --plan): {parsed_short(rows[0]['plan'])}")
    return table, footer


def parsed_short(plan: str) -> str:
    """The plan's compact form as ``--plan`` takes it."""
    from windtunnel.specs.errors import WindtunnelError
    from windtunnel.specs.plan import parse_plan

    try:
        return parse_plan(plan).short()
    except (WindtunnelError, ValueError):
        return plan
