"""The experiment report: ``report.html`` (self-contained), ``report.md`` and ``results.json``.

The report is built once as a list of blocks — headings, paragraphs, key
figures, tables, images, the explorer — and rendered twice:

* HTML: one file, no network.  Images are embedded as base64 PNG
  (``data:image/png;base64,...``); the interactive attention explorer
  (``attnlab.viz.explorer``) is embedded as an ``<iframe srcdoc>`` so that its
  script and styles stay its own; the CSS is inlined.
* Markdown: the same tables; images are linked by their path in the run
  folder (``figures/...``); the explorer is linked as ``explorer.html``.

``results.json`` holds every stage's result (the numbers behind each table).
Every file is written atomically (temporary file, then rename).
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

__all__ = ["Block", "build_blocks", "render_html", "render_markdown", "write_report", "report_stage"]


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
def _f(x: Any, digits: int = 3) -> str:
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


def _pct(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f} %"


# ----------------------------------------------------------------------------------- content
def build_blocks(results: dict, out: Path) -> list[Block]:
    """The report's content from the stages' results (see ``attnlab.experiment.pipeline``)."""
    s = results.get("_settings", {})
    models = {k[len("train-"):]: v for k, v in results.items() if k.startswith("train-")}
    ev = results.get("evaluate", {})
    cap = results.get("capture", {})
    tables = results.get("tables", {})
    choices = results.get("choices", {})
    est = results.get("estimate-w", {})
    surg = results.get("surgery", {})
    mech = results.get("mechanisms", {})
    big = "h8" if "h8" in models else next(iter(models), "h8")
    B: list[Block] = []

    # ---- headline
    cards = []
    for name in models:
        e = ev.get("models", {}).get(name)
        if e:
            cards.append((f"BLEU · {models[name]['title']}", f"{e['bleu']:.1f}", f"chrF {e['chrf']:.1f}"))
    t16 = tables.get("models", {}).get(big, {}).get("tables", {}).get("table16", {})
    if "ratio_of_means" in t16:
        cards.append(("random search / optimal fit", f"{t16['ratio_of_means']:.1f}×", "Table 16, 8 heads, mean error"))
    aligner = models.get(est.get("from_model"), {}).get("title", est.get("from_model", ""))  # the most confident model
    if "w" in est:
        known = est.get("known_max_reorder")
        cards.append(("estimated w (reordering)", str(est["w"]),
                      f"{aligner}; known max_reorder {known}" if known is not None else f"{aligner}, from cross-attention"))
    sb = surg.get("models", {}).get(big)
    if sb:
        cards.append(("head surgery BLEU", f"{sb['before']['bleu']:.1f} → {sb['per_head']['bleu']:.1f}",
                      f"{_pct(sb['per_head']['kept']['all'])} of entries kept"))
    B.append(Block("cards", rows=cards))
    B.append(Block("p", text=(
        f"Corpus <code>{html.escape(str(s.get('data', '?')))}</code>{' (quick run)' if s.get('quick') else ''}; "
        f"evaluation on the <b>{ev.get('split', '?')}</b> split ({ev.get('models', {}).get(big, {}).get('sentences', '?')} sources, greedy decoding, "
        f"sacrebleu). Total time {results.get('_total_seconds', '?')} s."
        + (" Tatoeba data: sentences and translations contributed to tatoeba.org, CC-BY 2.0 FR (attribution: Tatoeba)."
           if "tatoeba" in str(s.get("data", "")).lower() else ""))))

    # ---- 1–2 models
    B.append(Block("h2", "1–2 · The thesis's models and their translations"))
    rows = []
    for name, t in models.items():
        e = ev.get("models", {}).get(name, {})
        rows.append([t["title"], t["layers"], t["heads"], t["d_model"], t["d_k"], f"{t['parameters']:,}", t["steps"],
                     t["epochs"], f"{t['train_seconds']:.0f} s", _f(t["final_loss"], 2), _f(e.get("bleu"), 1), _f(e.get("chrf"), 1)])
    B.append(Block("table", headers=["model", "layers", "heads", "d_model", "d_k", "parameters", "steps", "epochs", "train time",
                                     "loss", "BLEU", "chrF"], rows=rows))
    for name, e in ev.get("models", {}).items():
        B.append(Block("h3", f"Sample translations — {e['title']}"))
        B.append(Block("table", headers=["source", "model", "reference"],
                       rows=[[html.escape(x["source"]), f"<b>{html.escape(x['hypothesis'])}</b>",
                             html.escape(" | ".join(x["references"][:2]))] for x in e["samples"][:5]]))

    # ---- 3 figures
    B.append(Block("h2", "3 · Attention on a 16-token sentence (the thesis's Figures 11–12)"))
    B.append(Block("p", text=(f"Sentence ({cap.get('sentence_tokens', '?')} tokens with EOS): "
                              f"“<i>{html.escape(cap.get('sentence', ''))}</i>” — rows are queries, columns keys; "
                              "the decoder reads the model's own translation.")))
    for name, figs in cap.get("figures", {}).items():
        tr = cap.get("models", {}).get(name, {}).get("translation", "")
        title = models.get(name, {}).get("title", name)
        label = {"h1": "Figure 11", "h8": "Figure 12"}.get(name, "Figure")
        single = models.get(name, {}).get("heads") == 1 and models.get(name, {}).get("layers") == 1
        B.append(Block("img", path=figs["encoder"], caption=f"{label} — {title}: encoder self-attention", width=560 if single else 0))
        B.append(Block("img", path=figs["cross"], caption=f"{title}: cross-attention (target × source), translation: “{tr}”",
                       width=560 if single else 0))
    if (out / "explorer.html").is_file():
        B.append(Block("h3", "Interactive explorer (8-head model: the sentence and evaluation pairs)"))
        B.append(Block("explorer", path="explorer.html"))

    # ---- 4 roles
    roles = results.get("roles", {}).get("models", {})
    if roles:
        B.append(Block("h2", "4 · Head roles (Voita et al. 2019) over the evaluation pairs"))
        for name, rs in roles.items():
            rows = [[r["kind"], r["layer"], r["head"], f"<b>{r['role']}</b>", _f(r["confidence"], 2),
                     f"{_f(r['positional'], 2)} ({r['offset']:+d})", _f(r["rare_token"], 2), f"{_f(r['sink'], 2)} {html.escape(r['sink_token'])}",
                     (f"{_f(r['syntactic'], 2)} vs {_f(r['syntactic_baseline'], 2)} {html.escape(r.get('syntactic_relation') or '')}"
                      if r.get("syntactic") is not None else "—"), _f(r["entropy_norm"], 2)]
                    for r in rs]
            B.append(Block("h3", models.get(name, {}).get("title", name)))
            B.append(Block("table", headers=["kind", "layer", "head", "role", "confidence", "positional (offset)", "rare-token",
                                             "sink", "syntactic vs baseline", "entropy (norm.)"], rows=rows))

    # ---- 5 tables
    if tables:
        B.append(Block("h2", "5 · Validation: the thesis's random search beside the optimal structured fit"))
        lo, hi = tables.get("thesis_mean_error", (0.062, 0.082))
        B.append(Block("p", text=(
            "Encoder self-attention of the 16-token sentence. <b>Random search</b> (the thesis's protocol: 30 draws from each of "
            "Σ1, Σ2(w), Σ3, nearest in the entrywise 1-norm; Min_distance and Mean Error = Min_distance / n²) beside the "
            f"<b>optimal fit</b> X* = band_w(A) + num_pos columns + n sparse entries. The thesis reports Mean Error {lo}–{hi}.")))
        for name, entry in tables.get("models", {}).items():
            for tname, t in entry["tables"].items():
                label = {"table16": "Table 16", "table17": "Table 17"}[tname]
                title = f"{label} (w = {t['w']}, num_pos = {t['num_pos']}) — {models.get(name, {}).get('title', name)}"
                B.append(Block("h3", title))
                if "skipped" in t:
                    B.append(Block("p", text=f"skipped: {t['skipped']}"))
                    continue
                rows = [[f"L{r['layer']} H{r['head']}", _f(r["random_min_distance"], 2), _f(r["random_mean_error"], 4),
                         _f(r["optimal_distance"], 3), _f(r["optimal_mean_error"], 5), f"<b>{_f(r['ratio'], 1)}×</b>",
                         _pct(r["mass_captured"]), r["stored_entries"]] for r in t["rows"]]
                rows.append(["<b>mean</b>", "", _f(t["mean_random_error"], 4), "", _f(t["mean_optimal_error"], 5),
                             f"<b>{_f(t['ratio_of_means'], 1)}×</b>", "", ""])
                B.append(Block("table", headers=["head", "Min_distance", "Mean Error", "optimal distance", "optimal mean error",
                                                 "ratio", "mass captured", "stored entries"], rows=rows))
                ev = t.get("eval", {})
                if ev.get("sentences"):
                    B.append(Block("p", text=(
                        f"Over the {ev['sentences']} captured evaluation sentences with n ≥ {ev['min_len']} = 2(2w + 1) ({ev['heads']} encoder heads, "
                        f"grouped by length): mean error {_f(ev['mean_random_error'], 4)} (random search) vs "
                        f"{_f(ev['mean_optimal_error'], 5)} (optimal fit), <b>{_f(ev['ratio_of_means'], 1)}×</b>.")))
            sw = entry.get("sweep")
            if sw:
                B.append(Block("img", width=520, path=sw["png"], caption=f"w × num_pos sweep of the optimal fit (s = n) — "
                                                              f"{models.get(name, {}).get('title', name)}; CSV: {sw['csv']}"))

    # ---- 6 choices + estimate
    if choices:
        B.append(Block("h2", "6 · Automatic (w, num_pos) per head, and the per-language estimate"))
        B.append(Block("p", text=(
            "Per head, the smallest budget (stored entries) of band + columns (no sparse residual) whose lost attention mass, "
            f"averaged over the evaluation pairs, is ≤ {_pct(s.get('target_lost_mass', 0.1))}; per model, one (w, num_pos) "
            "for all heads of a kind (heads on average). <i>kept</i> = stored entries / real entries.")))
        for name, kinds in choices.get("models", {}).items():
            rows = []
            for kind, c in kinds.items():
                for l, (ws, ps, ok, lm, kp) in enumerate(zip(c["w"], c["num_pos"], c["reached"], c["lost_mass"], c["kept"])):
                    cells = [f"{w}/{p}" if o else "full" for w, p, o in zip(ws, ps, ok)]
                    rows.append([kind, l, " · ".join(cells), _pct(sum(kp) / len(kp)), f"w = {c['model_w']}, num_pos = {c['model_num_pos']}",
                                 _pct(c["model_kept"])])
            B.append(Block("h3", models.get(name, {}).get("title", name)))
            B.append(Block("table", headers=["kind", "layer", "per head w/num_pos", "kept (per head)", "per model", "kept (per model)"], rows=rows))
    if est:
        B.append(Block("h3", "Per-language estimate of w and num_pos"))
        B.append(Block("p", text=(
            "ŵ = the largest reordering distance (source words a translation link crosses) reached by at least "
            f"{_pct(est.get('min_share', 0.02))} of the sentences, on alignments induced from each model's cross-attention "
            "(target word → source word with the most head-averaged attention); num_pos = the columns needed beside a band ŵ "
            "to lose ≤ the target mass. The per-language estimate is that of the most confident aligner (confidence = mean "
            "largest head-averaged cross-attention weight per target row, Voita et al. 2019). On the synthetic grammar the gold "
            "alignments and the generator's <code>max_reorder</code> are the check.")))
        rows = []
        if "gold" in est:
            g = est["gold"]
            rows.append(["gold alignments", g["w"], _shares(g), g["max"], _dist(g["distribution"]), "—", "—", "—", "—"])
        for name, e in est.get("models", {}).items():
            rows.append([f"cross-attention · {models.get(name, {}).get('title', name)}", f"<b>{e['w']}</b>", _shares(e), e["max"],
                         _dist(e["distribution"]), _f(e.get("num_pos")), _f(e.get("confidence"), 3), _pct(e.get("agreement_with_gold")),
                         _f(e.get("recovers_max_reorder"))])
        headers = ["alignment source", "ŵ", "ŵ at 2 / 5 / 10 %", "max", "distribution of d (sentences)", "num_pos", "confidence",
                   "links = gold", "recovers max_reorder"]
        B.append(Block("table", headers=headers, rows=rows))
        if "w" in est:
            B.append(Block("p", text=f"Per-language estimate: <b>ŵ = {est['w']}</b>, num_pos = {_f(est.get('num_pos'))} "
                                     f"(from the most confident aligner: {aligner})."))
        if est.get("known_max_reorder") is not None:
            B.append(Block("p", text=f"The grammar's known maximum reordering distance: <b>{est['known_max_reorder']}</b>"
                                     + (" — recovered." if est.get("recovers_max_reorder") else " — not recovered.")))

    # ---- 7 spectra
    sp = results.get("spectra", {})
    if sp:
        B.append(Block("h2", "7 · Singular-value spectra"))
        rows = []
        for name, kinds in sp.get("models", {}).items():
            for kind, v in kinds.items():
                for l in range(len(v["spectral_norm"])):
                    rows.append([models.get(name, {}).get("title", name), kind, l,
                                 " · ".join(_f(x, 2) for x in v["spectral_norm"][l]),
                                 " · ".join(_f(x, 2) for x in v["effective_rank_fraction"][l]),
                                 " · ".join(_f(x, 2) for x in v["energy_rank_90_fraction"][l])])
        B.append(Block("p", text="Per head (in order), averaged over the evaluation pairs: spectral norm σ₁, effective rank / n "
                                 "(Roy–Vetterli), 90 %-energy rank / n."))
        B.append(Block("table", headers=["model", "kind", "layer", "σ₁ per head", "effective rank / n", "90 %-energy rank / n"], rows=rows))
        for name, path in sp.get("figures", {}).items():
            B.append(Block("img", width=900, path=path, caption=f"Normalised singular values σ_k/σ₁ — {models.get(name, {}).get('title', name)}"))

    # ---- 8 mechanisms + surgery
    if mech:
        B.append(Block("h2", "8 · Mechanisms at the corpus's lengths, and head surgery"))
        st = mech["lengths"]
        B.append(Block("p", text=(
            f"Source lengths (tokens): median {st['median']}, 95th percentile {st['p95']}, max {st['max']}. Forward time of each "
            f"mechanism, H = {mech['heads']}, d_k = {mech['d_k']}, w = {mech['w']}, g = {mech['g']} (the 8-head encoder's automatic "
            f"choice), batch {s.get('timing_batch', '?')} (batch 1 at n = {mech['long_n']}), {mech.get('threads')} threads, min over "
            f"{s.get('timing_repeats', '?')} alternating rounds. Speed-up vs full (SDPA) and the ideal ratio of multiply-adds.")))
        names = list(dict.fromkeys(r["mechanism"] for r in mech["rows"]))
        rows = []
        for n in mech["timed_n"]:
            by = {r["mechanism"]: r for r in mech["rows"] if r["n"] == n}
            rows.append([n] + [f"{by[m]['fwd_ms']:.2f} ms<br><small>{by[m]['speedup_vs_full']:.2f}× / ideal {by[m]['ideal_speedup']:.1f}×</small>"
                               if m in by else "—" for m in names])
        B.append(Block("table", headers=["n"] + names, rows=rows))
    if surg:
        rows = []
        for name, e in surg.get("models", {}).items():
            title = models.get(name, {}).get("title", name)
            rows.append([title, "full attention (before)", _f(e["before"]["bleu"], 1), _f(e["before"]["chrf"], 1), "100 %", "—"])
            for variant, label in (("per_head", "surgery: per-head (w, num_pos)"), ("per_model", "surgery: one (w, num_pos) per kind")):
                if variant in e:
                    v = e[variant]
                    kept = " · ".join(f"{k} {_pct(x)}" for k, x in v["kept"].items() if k != "all")
                    rows.append([title, label, _f(v["bleu"], 1), _f(v["chrf"], 1), _pct(v["kept"]["all"]), kept])
            if "structured_mechanism" in e:
                v = e["structured_mechanism"]
                rows.append([title, "structured mechanism (first num_pos tokens as columns), no retraining", _f(v["bleu"], 1),
                             _f(v["chrf"], 1), "—", "—"])
        B.append(Block("h3", "Head surgery: every head replaced by its band + columns fit at inference"))
        B.append(Block("table", headers=["model", "attention", "BLEU", "chrF", "entries kept", "kept per kind"], rows=rows))
    B.append(Block("h2", "Reproduce"))
    B.append(Block("pre", text=f"attnlab experiment --data {s.get('data', 'synthetic')} --out {out}{' --quick' if s.get('quick') else ''} --force"))
    return B


def _shares(e: dict) -> str:
    return " / ".join(str(v) for v in e.get("w_at_share", {}).values()) or "—"


def _dist(d: dict) -> str:
    return " · ".join(f"{k}: {v}" for k, v in d.items())


# ----------------------------------------------------------------------------------- renderers
CSS = """
:root{--fg:#1d2430;--muted:#5b6576;--line:#e3e7ee;--bg:#f6f8fb;--accent:#2f6fdd;--card:#fff}
*{box-sizing:border-box}body{margin:0;font:15px/1.5 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:var(--fg);background:var(--bg)}
header{background:linear-gradient(120deg,#1f3b73,#2f6fdd);color:#fff;padding:28px 40px}
header h1{margin:0 0 4px;font-size:26px}header p{margin:0;opacity:.85}
main{max-width:1240px;margin:0 auto;padding:20px 40px 60px}
h2{margin:36px 0 10px;padding-bottom:6px;border-bottom:2px solid var(--line);font-size:21px}
h3{margin:22px 0 8px;font-size:16px;color:#263a5e}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(190px,1fr));gap:14px;margin:8px 0 16px}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:14px 16px;box-shadow:0 1px 2px rgba(0,0,0,.04)}
.card .label{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.card .value{font-size:26px;font-weight:700;color:var(--accent);margin:2px 0}
.card .sub{color:var(--muted);font-size:12.5px}
table{border-collapse:collapse;width:100%;margin:6px 0 14px;background:#fff;border:1px solid var(--line);font-size:13.5px}
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
            cards = "".join(f"<div class='card'><div class='label'>{html.escape(l)}</div><div class='value'>{html.escape(v)}</div>"
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
    return _f(c) if not isinstance(c, str) else c


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



def write_report(results: dict, out: str | os.PathLike) -> dict[str, Path]:
    """Write ``report.html``, ``report.md`` and ``results.json`` into the run folder ``out``."""
    out = Path(out)
    s = results.get("_settings", {})
    title = "attnlab experiment — what do the heads of a translation transformer do, and how cheaply can they be computed?"
    subtitle = f"data: {s.get('data', '?')}{' · quick' if s.get('quick') else ''} · run folder: {out}"
    blocks = build_blocks(results, out)
    paths = {
        "html": write_text_atomic(out / "report.html", render_html(blocks, out, title, subtitle)),
        "md": write_text_atomic(out / "report.md", render_markdown(blocks, title, subtitle)),
        "json": write_text_atomic(out / "results.json", json.dumps(results, indent=1, ensure_ascii=False)),
    }
    return paths


def report_stage(ctx) -> dict:
    """The last stage of ``attnlab experiment``: the explorer of the 8-head model, then the report."""
    from attnlab.analysis.attention_maps import AttentionMaps
    from attnlab.analysis.roles import HeadRole
    from attnlab.experiment.attention import load_maps
    from attnlab.viz.explorer import write_explorer

    results = {k: v for k, v in ctx.results.items()}
    results["_settings"] = ctx.settings.to_dict()
    results["_total_seconds"] = round(sum(v.get("_seconds", 0.0) for v in ctx.results.values() if isinstance(v, dict)), 1)
    name = "h8"
    one, ev = load_maps(ctx, name, "sentence"), load_maps(ctx, name, "eval")
    maps = AttentionMaps(list(one) + list(ev.select(range(min(5, len(ev))))), one.model)
    roles = [HeadRole(**r) for r in ctx.results.get("roles", {}).get("models", {}).get(name, [])]
    write_explorer(maps, ctx.out / "explorer.html", roles or None)
    paths = write_report(results, ctx.out)
    size = paths["html"].stat().st_size
    return {"files": {k: str(p.relative_to(ctx.out)) for k, p in paths.items()}, "html_bytes": size,
            "_note": f"report.html {size / 1e6:.1f} MB"}
