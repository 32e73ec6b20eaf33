"""Pieces the HTML search reports share (training and serving): a page style whose tables fit or scroll
inside their box, and the candidate counts as a table (not a JSON dump)."""

from __future__ import annotations

import html

STYLE = ("<style>body{font-family:sans-serif;margin:2em;max-width:1400px}"
         ".scroll{overflow-x:auto;max-width:100%}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}td.n{text-align:right}"
         "code{white-space:pre-wrap;word-break:break-all}</style>")


def scroll(table_html: str) -> str:
    """A table in a box that scrolls sideways when the table is wider than the page."""
    return f'<div class="scroll">{table_html}</div>'


def counts_table(candidates: dict) -> str:
    """Candidate counts (``{'enumerated': n, 'pruned': {reason: n}, ...}``) as a two-column HTML table; nested
    counts are rows of their own, indented under their group with the group's total."""
    rows = []
    for key, value in candidates.items():
        if isinstance(value, dict):
            total = sum(v for v in value.values() if isinstance(v, (int, float)))
            rows.append(f"<tr><th>{html.escape(str(key))}</th><td class=n>{total:,}</td></tr>")
            rows += [f"<tr><td>&nbsp;&nbsp;{html.escape(str(k))}</td><td class=n>{_number(v)}</td></tr>"
                     for k, v in value.items()]
        else:
            rows.append(f"<tr><th>{html.escape(str(key))}</th><td class=n>{_number(value)}</td></tr>")
    return scroll("<table><tr><th>candidates</th><th>count</th></tr>" + "".join(rows) + "</table>")


def _number(value) -> str:
    return f"{value:,}" if isinstance(value, int) else html.escape(str(value))
