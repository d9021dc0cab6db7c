"""The report as one self-contained HTML page: inline CSS, images as data: URIs, no script, no network."""

from __future__ import annotations

import base64
from html import escape

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1240px;padding:0 20px 40px;
color:#222;background:#fff}
h1{font-size:24px;margin:20px 0 4px}h2{font-size:19px;margin:32px 0 8px;border-bottom:2px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}nav a{margin-right:14px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:12.5px}th,td{border:1px solid #ddd;padding:3px 7px;
text-align:left;vertical-align:top}th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.flagged td{background:#fde2e1}tr.error td:first-child{color:#b00020;font-weight:600}
tr.warning td:first-child{color:#9a6700;font-weight:600}
.verdict{font-size:16px;font-weight:600;padding:6px 10px;display:inline-block;border-radius:4px}
.verdict.ok{background:#e3f5e1;color:#1e6b1e}.verdict.bad{background:#fde2e1;color:#b00020}
.verdict.warn{background:#fff4d6;color:#7a5300}
img.plot{max-width:100%;display:block;margin:6px 0}
pre{background:#f6f8fa;padding:8px 10px;white-space:pre-wrap;word-break:break-all;font-size:12.5px}
figure{margin:0;display:inline-block;text-align:center}figure img{display:block;max-width:240px}
figcaption{font-size:11px;color:#333;font-variant-numeric:tabular-nums}
figcaption.mismatch{color:#b00020;font-weight:700;background:#fde2e1}
.note{color:#666;font-size:12.5px}
"""


def image(data: bytes, mime: str | None = None, alt: str = "", cls: str = "plot") -> str:
    """An <img> of `data` as a data: URI; its type is `mime`, else read from its first bytes (SVG, else PNG)."""
    mime = mime or ("image/svg+xml" if data[:64].lstrip()[:5] in (b"<?xml", b"<svg ") else "image/png")
    return f'<img class="{cls}" alt="{escape(alt)}" src="data:{mime};base64,{base64.b64encode(data).decode()}">'


class Html(str):
    """Markup made here (a thumbnail figure): `table` inserts it as it is. Every other cell is text, escaped."""


def cell(value) -> str:
    """A table cell's HTML: text (task strings, feature and file names, messages: anything from a dataset) is
    escaped, so `<script>` or `the [red] cube` shows as typed; None is empty; `Html` is inserted as it is."""
    if isinstance(value, Html):
        return value
    return escape("" if value is None else str(value))


def table(headers: list[str], rows: list[list], row_attrs: list[str] | None = None, numeric: set[int] = frozenset()) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cells = "".join(f'<td{" class=num" if j in numeric else ""}>{cell(c)}</td>' for j, c in enumerate(row))
        body.append(f"<tr{(' ' + row_attrs[i]) if row_attrs and row_attrs[i] else ''}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def number(value) -> str:
    """A number as the tables show it (text: `table` escapes it)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return "NaN" if value != value else f"{value:.6g}"
    return str(value)


def document(title: str, sections: list[tuple[str, str, str]], subtitle: str) -> str:
    """`sections`: (anchor, heading, body html)."""
    nav = "".join(f'<a href="#{a}">{escape(h)}</a>' for a, h, _ in sections)
    body = "".join(f'<section id="{a}"><h2>{escape(h)}</h2>{html}</section>' for a, h, html in sections)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><title>{escape(title)}</title>'
            f"<style>{CSS}</style></head><body><h1>{escape(title)}</h1><p class=note>{subtitle}</p>"
            f"<nav>{nav}</nav>{body}</body></html>\n")
