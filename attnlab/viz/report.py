"""A report as a list of blocks — headings, paragraphs, key figures, tables, images, an explorer — rendered twice.

* HTML: one file, no network.  Images are embedded as base64 PNG
  (``data:image/png;base64,...``); the interactive attention explorer
  (``attnlab.viz.explorer``) is embedded as an ``<iframe srcdoc>`` so that its
  script and styles stay its own; the CSS is inlined.
* Markdown: the same tables; images are linked by their path in the run
  folder (``figures/...``); the explorer is linked by its path.

Generic: what a report says is its author's (the experiment's sections are
``attnlab.experiment.report``).  ``write_report`` also writes the numbers
behind it as JSON.  Every file is written atomically (temporary file, then rename).
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.atomic import write_text_atomic

__all__ = ["Block", "fmt", "pct", "render_html", "render_markdown", "write_report"]


@dataclass
class Block:
    kind: str                      # h2 | h3 | p | cards | table | img | explorer | pre
    text: str = ""
    rows: list = field(default_factory=list)
    headers: list = field(default_factory=list)
    path: str = ""                 # img / explorer: path relative to the run folder
    caption: str = ""
    width: int = 0                 # img: maximum display width in px (0 = the page's)


# ----------------------------------------------------------------------------------- formatting
def fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "—"
        if math.isinf(x):
            return "∞"
        return f"{x:.{digits}f}"
    return str(x)


def pct(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f} %"


# ----------------------------------------------------------------------------------- renderers
CSS = """
:root{--fg:#1d2430;--muted:#5b6576;--line:#e3e7ee;--bg:#f6f8fb;--accent:#2f6fdd;--card:#fff}
*{box-sizing:border-box}
body{margin:0;font:15px/1.5 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
  color:var(--fg);background:var(--bg)}
header{background:linear-gradient(120deg,#1f3b73,#2f6fdd);color:#fff;padding:28px 40px}
header h1{margin:0 0 4px;font-size:26px}header p{margin:0;opacity:.85}
main{max-width:1240px;margin:0 auto;padding:20px 40px 60px}
h2{margin:36px 0 10px;padding-bottom:6px;border-bottom:2px solid var(--line);font-size:21px}
h3{margin:22px 0 8px;font-size:16px;color:#263a5e}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(190px,1fr));gap:14px;margin:8px 0 16px}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:14px 16px;
  box-shadow:0 1px 2px rgba(0,0,0,.04)}
.card .label{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.card .value{font-size:26px;font-weight:700;color:var(--accent);margin:2px 0}
.card .sub{color:var(--muted);font-size:12.5px}
table{border-collapse:collapse;width:100%;margin:6px 0 14px;background:#fff;border:1px solid var(--line);
  font-size:13.5px}
th{background:#eef2f8;text-align:left;font-weight:600;padding:6px 9px;border-bottom:1px solid var(--line)}
td{padding:5px 9px;border-bottom:1px solid #eef0f4;vertical-align:top}
tr:nth-child(even) td{background:#fafbfd}
td small{color:var(--muted)}
figure{margin:10px 0 18px;background:#fff;border:1px solid var(--line);border-radius:10px;padding:12px;overflow-x:auto}
figure img{max-width:100%;height:auto;display:block;margin:0 auto}
figcaption{color:var(--muted);font-size:13px;margin-top:6px;text-align:center}
iframe{width:100%;height:980px;border:1px solid var(--line);border-radius:10px;background:#fff}
pre{background:#1d2430;color:#e8edf5;padding:12px 14px;border-radius:8px;overflow-x:auto}
code{background:#eef2f8;padding:1px 5px;border-radius:4px}
"""


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def render_html(blocks: list[Block], out: Path, title: str, subtitle: str) -> str:
    """The self-contained HTML page (images as base64, the explorer in an iframe srcdoc)."""
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{CSS}</style></head><body>"
             f"<header><h1>{html.escape(title)}</h1><p>{html.escape(subtitle)}</p></header><main>"]
    for b in blocks:
        if b.kind in ("h2", "h3"):
            parts.append(f"<{b.kind}>{html.escape(b.text)}</{b.kind}>")
        elif b.kind == "p":
            parts.append(f"<p>{b.text}</p>")
        elif b.kind == "pre":
            parts.append(f"<pre>{html.escape(b.text)}</pre>")
        elif b.kind == "cards":
            cards = "".join(f"<div class='card'><div class='label'>{html.escape(l)}</div><div "
                            f"class='value'>{html.escape(v)}</div>"
                            f"<div class='sub'>{html.escape(sub)}</div></div>" for l, v, sub in b.rows)
            parts.append(f"<div class='cards'>{cards}</div>")
        elif b.kind == "table":
            head = "".join(f"<th>{html.escape(str(h))}</th>" for h in b.headers)
            body = "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in row) + "</tr>" for row in b.rows)
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif b.kind == "img":
            p = out / b.path
            if p.is_file():
                style = f" style='width:min(100%,{b.width}px)'" if b.width else ""
                parts.append(f"<figure><img src='{_data_uri(p)}'{style} alt='{html.escape(b.caption)}'>"
                             f"<figcaption>{html.escape(b.caption)}</figcaption></figure>")
        elif b.kind == "explorer":
            page = (out / b.path).read_text(encoding="utf-8")
            parts.append(f"<iframe title='attention explorer' srcdoc=\"{html.escape(page, quote=True)}\"></iframe>")
    parts.append("</main></body></html>")
    return "".join(parts)


def _cell(c) -> str:
    """Table cells: numbers formatted, strings taken as (trusted, escaped upstream) HTML."""
    return fmt(c) if not isinstance(c, str) else c


def _md_text(text: str) -> str:
    import re

    text = re.sub(r"<br\s*/?>", " ", text)
    text = re.sub(r"</?(b)>", "**", text)
    text = re.sub(r"</?(i)>", "*", text)
    text = re.sub(r"</?code>", "`", text)
    text = re.sub(r"<[^>]+>", "", text)
    return html.unescape(text)


def render_markdown(blocks: list[Block], title: str, subtitle: str) -> str:
    """The same content as Markdown; images and the explorer linked by path."""
    lines = [f"# {title}", "", subtitle, ""]
    for b in blocks:
        if b.kind == "h2":
            lines += [f"## {b.text}", ""]
        elif b.kind == "h3":
            lines += [f"### {b.text}", ""]
        elif b.kind == "p":
            lines += [_md_text(b.text), ""]
        elif b.kind == "pre":
            lines += ["```", b.text, "```", ""]
        elif b.kind == "cards":
            lines += [f"- **{l}**: {v} ({sub})" for l, v, sub in b.rows] + [""]
        elif b.kind == "table":
            lines.append("| " + " | ".join(str(h) for h in b.headers) + " |")
            lines.append("|" + "---|" * len(b.headers))
            for row in b.rows:
                lines.append("| " + " | ".join(_md_text(_cell(c)).replace("|", "\\|") for c in row) + " |")
            lines.append("")
        elif b.kind == "img":
            lines += [f"![{b.caption}]({b.path})", "", f"*{b.caption}*", ""]
        elif b.kind == "explorer":
            lines += [f"Interactive explorer: [{b.path}]({b.path})", ""]
    return "\n".join(lines)



def write_report(blocks: list[Block], out: str | os.PathLike, title: str, subtitle: str,
                 data: dict | None = None) -> dict[str, Path]:
    """Write ``report.html``, ``report.md`` (and ``results.json`` = ``data``) into the folder ``out``."""
    out = Path(out)
    paths = {
        "html": write_text_atomic(out / "report.html", render_html(blocks, out, title, subtitle)),
        "md": write_text_atomic(out / "report.md", render_markdown(blocks, title, subtitle)),
    }
    if data is not None:
        paths["json"] = write_text_atomic(out / "results.json", json.dumps(data, indent=1, ensure_ascii=False))
    return paths
