"""Stage 9: the experiment's report — its sections, then ``report.html``, ``report.md`` and ``results.json``.

The experiment owns what its report says (``build_blocks``: one section per
stage, from the stages' results); ``attnlab.viz.report`` renders the blocks
(HTML, self-contained; Markdown) and the explorer is ``attnlab.viz.explorer``.
``results.json`` holds every stage's result (the numbers behind each table).
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from attnlab.experiment.attention import load_maps
from attnlab.viz.report import Block, fmt, pct
from attnlab.viz.report import write_report as render_report

__all__ = ["build_blocks", "write_report", "report_stage"]


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
                      f"{aligner}; known max_reorder {known}" if known is not None
                      else f"{aligner}, from cross-attention"))
    sb = surg.get("models", {}).get(big)
    if sb:
        cards.append(("head surgery BLEU", f"{sb['before']['bleu']:.1f} → {sb['per_head']['bleu']:.1f}",
                      f"{pct(sb['per_head']['kept']['all'])} of entries kept"))
    B.append(Block("cards", rows=cards))
    B.append(Block("p", text=(
        f"Corpus <code>{html.escape(str(s.get('data', '?')))}</code>{' (quick run)' if s.get('quick') else ''}; "
        f"evaluation on the <b>{ev.get('split', '?')}</b> split "
        f"({ev.get('models', {}).get(big, {}).get('sentences', '?')} sources, greedy decoding, "
        f"sacrebleu). Total time {results.get('_total_seconds', '?')} s."
        + (" Tatoeba data: sentences and translations contributed to tatoeba.org, CC-BY 2.0 FR (attribution: Tatoeba)."
           if "tatoeba" in str(s.get("data", "")).lower() else ""))))

    # ---- 1–2 models
    B.append(Block("h2", "1–2 · The thesis's models and their translations"))
    rows = []
    for name, t in models.items():
        e = ev.get("models", {}).get(name, {})
        rows.append([t["title"], t["layers"], t["heads"], t["d_model"], t["d_k"], f"{t['parameters']:,}", t["steps"],
                     html.escape(t.get("stopped", "?")), t["epochs"], f"{t['train_seconds']:.0f} s",
                     fmt(t["final_loss"], 2), fmt(e.get("bleu"), 1), fmt(e.get("chrf"), 1)])
    B.append(Block("table", headers=["model", "layers", "heads", "d_model", "d_k", "parameters", "steps", "stopped",
                                     "epochs", "train time", "loss", "BLEU", "chrF"], rows=rows))
    cut = [t for t in models.values() if "limit" in t.get("stopped", "")]
    if cut:
        B.append(Block("p", text="<b>Training was cut short by wall time</b>: "
                                 + "; ".join(f"{html.escape(t['title'])} {html.escape(t['stopped'])}" for t in cut)
                                 + ". The models and every figure below depend on the machine's speed."))
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
        width = 560 if single else 0
        B.append(Block("img", path=figs["encoder"], caption=f"{label} — {title}: encoder self-attention", width=width))
        B.append(Block("img", path=figs["cross"], width=width,
                       caption=f"{title}: cross-attention (target × source), translation: “{tr}”"))
    if (out / "explorer.html").is_file():
        B.append(Block("h3", "Interactive explorer (8-head model: the sentence and evaluation pairs)"))
        B.append(Block("explorer", path="explorer.html"))

    # ---- 4 roles
    roles = results.get("roles", {}).get("models", {})
    if roles:
        B.append(Block("h2", "4 · Head roles (Voita et al. 2019) over the evaluation pairs"))
        B.append(Block("p", text=(
            "One role per head, the first that applies: positional, syntactic, rare-token, sink, broad, else other. "
            "Syntactic: the head's most attended key is the gold one more often than the best fixed offset would "
            "(≥ 10 points): dependency arcs for the encoder; for the cross-attention the grammar's word alignment, "
            "read at the query that emits each target word (Bahdanau et al. 2014).")))
        for name, rs in roles.items():
            rows = [[r["kind"], r["layer"], r["head"], f"<b>{r['role']}</b>", fmt(r["confidence"], 2),
                     f"{fmt(r['positional'], 2)} ({r['offset']:+d})", fmt(r["rare_token"], 2),
                     f"{fmt(r['sink'], 2)} {html.escape(r['sink_token'])}",
                     (f"{fmt(r['syntactic'], 2)} vs {fmt(r['syntactic_baseline'], 2)} "
                      f"{html.escape(r.get('syntactic_relation') or '')}"
                      if r.get("syntactic") is not None else "—"), fmt(r["entropy_norm"], 2)]
                    for r in rs]
            B.append(Block("h3", models.get(name, {}).get("title", name)))
            B.append(Block("table", headers=["kind", "layer", "head", "role", "confidence", "positional (offset)",
                                             "rare-token", "sink", "syntactic vs baseline", "entropy (norm.)"],
                           rows=rows))

    # ---- 5 tables
    if tables:
        B.append(Block("h2", "5 · Validation: the thesis's random search beside the optimal structured fit"))
        lo, hi = tables.get("thesis_mean_error", (0.062, 0.082))
        B.append(Block("p", text=(
            "Encoder self-attention of the 16-token sentence. <b>Random search</b> (the thesis's protocol: 30 draws "
            "from each of Σ1, Σ2(w), Σ3, nearest in the entrywise 1-norm; Min_distance and Mean Error = Min_distance / "
            "n²) beside the <b>optimal fit</b> X* = band_w(A) + num_pos columns + n sparse entries. The thesis reports "
            f"Mean Error {lo}–{hi}.")))
        for name, entry in tables.get("models", {}).items():
            for tname, t in entry["tables"].items():
                label = {"table16": "Table 16", "table17": "Table 17"}[tname]
                title = f"{label} (w = {t['w']}, num_pos = {t['num_pos']}) — {models.get(name, {}).get('title', name)}"
                B.append(Block("h3", title))
                if "skipped" in t:
                    B.append(Block("p", text=f"skipped: {t['skipped']}"))
                    continue
                rows = [[f"L{r['layer']} H{r['head']}", fmt(r["random_min_distance"], 2),
                         fmt(r["random_mean_error"], 4), fmt(r["optimal_distance"], 3),
                         fmt(r["optimal_mean_error"], 5), f"<b>{fmt(r['ratio'], 1)}×</b>",
                         pct(r["mass_captured"]), r["stored_entries"]] for r in t["rows"]]
                rows.append(["<b>mean</b>", "", fmt(t["mean_random_error"], 4), "", fmt(t["mean_optimal_error"], 5),
                             f"<b>{fmt(t['ratio_of_means'], 1)}×</b>", "", ""])
                B.append(Block("table", headers=["head", "Min_distance", "Mean Error", "optimal distance",
                                                 "optimal mean error", "ratio", "mass captured", "stored entries"],
                               rows=rows))
                ev = t.get("eval", {})
                if ev.get("sentences"):
                    B.append(Block("p", text=(
                        f"Over the {ev['sentences']} captured evaluation sentences with n ≥ {ev['min_len']} = "
                        f"2(2w + 1) ({ev['heads']} encoder heads, "
                        f"grouped by length): mean error {fmt(ev['mean_random_error'], 4)} (random search) vs "
                        f"{fmt(ev['mean_optimal_error'], 5)} (optimal fit), <b>{fmt(ev['ratio_of_means'], 1)}×</b>.")))
            sw = entry.get("sweep")
            if sw:
                B.append(Block("img", width=520, path=sw["png"],
                               caption=f"w × num_pos sweep of the optimal fit (s = n) — "
                                       f"{models.get(name, {}).get('title', name)}; CSV: {sw['csv']}"))

    # ---- 6 choices + estimate
    if choices:
        B.append(Block("h2", "6 · Automatic (w, num_pos) per head, and the per-language estimate"))
        B.append(Block("p", text=(
            "Per head, the smallest budget (stored entries) of band + columns (no sparse residual) whose lost "
            f"attention mass, averaged over the evaluation pairs, is ≤ {pct(s.get('target_lost_mass', 0.1))}; per "
            "model, one (w, num_pos) "
            "for all heads of a kind (heads on average). <i>kept</i> = stored entries / real entries.")))
        for name, kinds in choices.get("models", {}).items():
            rows = []
            for kind, c in kinds.items():
                per_layer = zip(c["w"], c["num_pos"], c["reached"], c["lost_mass"], c["kept"])
                for l, (ws, ps, ok, lm, kp) in enumerate(per_layer):
                    cells = [f"{w}/{p}" if o else "full" for w, p, o in zip(ws, ps, ok)]
                    rows.append([kind, l, " · ".join(cells), pct(sum(kp) / len(kp)),
                                 f"w = {c['model_w']}, num_pos = {c['model_num_pos']}", pct(c["model_kept"])])
            B.append(Block("h3", models.get(name, {}).get("title", name)))
            B.append(Block("table", headers=["kind", "layer", "per head w/num_pos", "kept (per head)", "per model",
                                             "kept (per model)"], rows=rows))
    if est:
        B.append(Block("h3", "Per-language estimate of w and num_pos"))
        B.append(Block("p", text=(
            "ŵ = the largest reordering distance (source words a translation link crosses) reached by at least "
            f"{pct(est.get('min_share', 0.02))} of the sentences, on alignments induced from each model's "
            "cross-attention (target word → source word with the most head-averaged attention); num_pos = the columns "
            "needed beside a band ŵ to lose ≤ the target mass. The per-language estimate is that of the most confident "
            "aligner (confidence = mean largest head-averaged cross-attention weight per target row, Voita et al. "
            "2019). On the synthetic grammar the gold alignments and the generator's <code>max_reorder</code> are the "
            "check.")))
        rows = []
        if "gold" in est:
            g = est["gold"]
            rows.append(["gold alignments", g["w"], _shares(g), g["max"], _dist(g["distribution"]), "—", "—", "—", "—"])
        for name, e in est.get("models", {}).items():
            rows.append([f"cross-attention · {models.get(name, {}).get('title', name)}", f"<b>{e['w']}</b>",
                         _shares(e), e["max"], _dist(e["distribution"]), fmt(e.get("num_pos")),
                         fmt(e.get("confidence"), 3), pct(e.get("agreement_with_gold")),
                         fmt(e.get("recovers_max_reorder"))])
        headers = ["alignment source", "ŵ", "ŵ at 2 / 5 / 10 %", "max", "distribution of d (sentences)", "num_pos",
                   "confidence", "links = gold", "recovers max_reorder"]
        B.append(Block("table", headers=headers, rows=rows))
        if "w" in est:
            B.append(Block("p", text=f"Per-language estimate: <b>ŵ = {est['w']}</b>, "
                                     f"num_pos = {fmt(est.get('num_pos'))} "
                                     f"(from the most confident aligner: {aligner})."))
        if est.get("known_max_reorder") is not None:
            recovered = " — recovered." if est.get("recovers_max_reorder") else " — not recovered."
            B.append(Block("p", text="The grammar's known maximum reordering distance: "
                                     f"<b>{est['known_max_reorder']}</b>{recovered}"))

    # ---- 7 spectra
    sp = results.get("spectra", {})
    if sp:
        B.append(Block("h2", "7 · Singular-value spectra"))
        rows = []
        for name, kinds in sp.get("models", {}).items():
            for kind, v in kinds.items():
                for l in range(len(v["spectral_norm"])):
                    rows.append([models.get(name, {}).get("title", name), kind, l,
                                 " · ".join(fmt(x, 2) for x in v["spectral_norm"][l]),
                                 " · ".join(fmt(x, 2) for x in v["effective_rank_fraction"][l]),
                                 " · ".join(fmt(x, 2) for x in v["energy_rank_90_fraction"][l])])
        B.append(Block("p", text="Per head (in order), averaged over the evaluation pairs: spectral norm σ₁, effective "
                                 "rank / n (Roy–Vetterli), 90 %-energy rank / n."))
        B.append(Block("table", headers=["model", "kind", "layer", "σ₁ per head", "effective rank / n",
                                         "90 %-energy rank / n"], rows=rows))
        for name, path in sp.get("figures", {}).items():
            B.append(Block("img", width=900, path=path,
                           caption=f"Normalised singular values σ_k/σ₁ — {models.get(name, {}).get('title', name)}"))

    # ---- 8 mechanisms + surgery
    if mech:
        B.append(Block("h2", "8 · Mechanisms at the corpus's lengths, and head surgery"))
        st = mech["lengths"]
        B.append(Block("p", text=(
            f"Source lengths (tokens): median {st['median']}, 95th percentile {st['p95']}, max {st['max']}. Forward "
            f"time of each mechanism, H = {mech['heads']}, d_k = {mech['d_k']}, w = {mech['w']}, g = {mech['g']} (the "
            f"8-head encoder's automatic choice), batch {s.get('timing_batch', '?')} "
            f"(batch 1 at n = {mech['long_n']}), "
            f"{mech.get('threads')} threads, min over {s.get('timing_repeats', '?')} alternating rounds. Speed-up vs "
            "full (SDPA) and the ideal ratio of multiply-adds.")))
        names = list(dict.fromkeys(r["mechanism"] for r in mech["rows"]))
        rows = []
        for n in mech["timed_n"]:
            by = {r["mechanism"]: r for r in mech["rows"] if r["n"] == n}
            rows.append([n] + [f"{by[m]['fwd_ms']:.2f} ms<br><small>{by[m]['speedup_vs_full']:.2f}× / "
                               f"ideal {by[m]['ideal_speedup']:.1f}×</small>" if m in by else "—" for m in names])
        B.append(Block("table", headers=["n"] + names, rows=rows))
    if surg:
        rows = []
        for name, e in surg.get("models", {}).items():
            title = models.get(name, {}).get("title", name)
            rows.append([title, "full attention (before)", fmt(e["before"]["bleu"], 1), fmt(e["before"]["chrf"], 1),
                         "100 %", "—"])
            for variant, label in (("per_head", "surgery: per-head (w, num_pos)"),
                                   ("per_model", "surgery: one (w, num_pos) per kind")):
                if variant in e:
                    v = e[variant]
                    kept = " · ".join(f"{k} {pct(x)}" for k, x in v["kept"].items() if k != "all")
                    rows.append([title, label, fmt(v["bleu"], 1), fmt(v["chrf"], 1), pct(v["kept"]["all"]), kept])
            if "structured_mechanism" in e:
                v = e["structured_mechanism"]
                rows.append([title, "structured mechanism (first num_pos tokens as columns), no retraining",
                             fmt(v["bleu"], 1), fmt(v["chrf"], 1), "—", "—"])
        B.append(Block("h3", "Head surgery: every head replaced by its band + columns fit at inference"))
        B.append(Block("table", headers=["model", "attention", "BLEU", "chrF", "entries kept", "kept per kind"],
                       rows=rows))
    B.append(Block("h2", "Reproduce"))
    quick = " --quick" if s.get("quick") else ""
    B.append(Block("pre", text=f"attnlab experiment --data {s.get('data', 'synthetic')} --out {out}{quick} --force"))
    return B


def _shares(e: dict) -> str:
    return " / ".join(str(v) for v in e.get("w_at_share", {}).values()) or "—"


def _dist(d: dict) -> str:
    return " · ".join(f"{k}: {v}" for k, v in d.items())


def write_report(results: dict, out: str | os.PathLike) -> dict[str, Path]:
    """Write ``report.html``, ``report.md`` and ``results.json`` into the run folder ``out``."""
    out = Path(out)
    s = results.get("_settings", {})
    title = ("attnlab experiment — what do the heads of a translation transformer do, and how cheaply can they be "
             "computed?")
    subtitle = f"data: {s.get('data', '?')}{' · quick' if s.get('quick') else ''} · run folder: {out}"
    return render_report(build_blocks(results, out), out, title, subtitle, data=results)


def report_stage(ctx) -> dict:
    """The last stage of ``attnlab experiment``: the explorer of the 8-head model, then the report."""
    from attnlab.analysis.attention_maps import AttentionMaps
    from attnlab.analysis.roles import HeadRole
    from attnlab.viz.explorer import write_explorer

    results = {k: v for k, v in ctx.results.items()}
    results["_settings"] = ctx.settings.to_dict()
    results["_total_seconds"] = round(sum(v.get("_seconds", 0.0) for v in ctx.results.values()
                                          if isinstance(v, dict)), 1)
    name = "h8"
    one, ev = load_maps(ctx, name, "sentence"), load_maps(ctx, name, "eval")
    maps = AttentionMaps(list(one) + list(ev.select(range(min(5, len(ev))))), one.model)
    roles = [HeadRole(**r) for r in ctx.results.get("roles", {}).get("models", {}).get(name, [])]
    write_explorer(maps, ctx.out / "explorer.html", roles or None)
    paths = write_report(results, ctx.out)
    size = paths["html"].stat().st_size
    return {"files": {k: str(p.relative_to(ctx.out)) for k, p in paths.items()}, "html_bytes": size,
            "_note": f"report.html {size / 1e6:.1f} MB"}
