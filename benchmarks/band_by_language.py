"""Does a head's band half-width ŵ (and num_pos) depend on the language, the form or the author's period?

The thesis's open question on real LLMs.  For each model, every head is fitted
on long inputs of six conditions, in three comparisons of the same content or
the same author:

* **language**   English vs Italian: the two sides of the same Tatoeba test pairs
                 (``--data``, ``english<TAB>italian`` per line; the last translation of
                 each English sentence), concatenated; input k takes pairs k·P … so both
                 sides say the same thing;
* **form**       Shakespeare's verse vs prose speeches (``--shakespeare``): a speech
                 (the lines under a speaker's name) is verse when every line starts
                 with a capital and lines are short (mean < 60 characters), prose when
                 most continuation lines start lower-case; input k = consecutive
                 speeches of one kind from the k-th part of the works;
* **period**     early (1591–1595) vs late (1606–1613) plays: input k = text 40,000 characters
                 into the k-th play of each list.

Each input is cut to ``--tokens`` n tokens and streamed through the model
(``attnlab.llm.heads.long_capture.capture_long``: the exact structured fit of band w +
num_pos key columns, ``attnlab.llm.heads.streamed_fit``); per head the fit with the
fewest entries holding ≥ ``--target`` of the mass gives (ŵ, num_pos); a head that
no grid point (w < n, num_pos ≤ 64) fits gets ŵ = n − 1 (the whole band).  Per head
and condition: the mean and the range [min, max] of ŵ over the inputs.  A head
*differs* between two conditions when the two ranges do not overlap (every
input of one condition above every input of the other).  Chance level: the mean
number of such heads over every relabelling of the 2k inputs into two groups of
k (a permutation null; with k = 3 about 1 head in 10 by chance for a continuous ŵ).

    python benchmarks/band_by_language.py --models smollm2-135m,gemma3-270m --tokens 1024 --inputs 3
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent.parent / "shared" / "data" if (ROOT.parent.parent / "shared").is_dir() else Path("/work/shared/data")

EARLY = ("THE COMEDY OF ERRORS", "THE TRAGEDY OF TITUS ANDRONICUS", "THE HISTORY OF KING HENRY THE SIXTH, THIRD PART",
         "THE TAMING OF THE SHREW", "LOVE'S LABOUR'S LOST")  # 1591–1595
LATE = ("ANTONY AND CLEOPATRA", "THE TRAGEDY OF CORIOLANUS", "PERICLES PRINCE OF TYRE", "CYMBELINE",
        "THE WINTER'S TALE", "THE LIFE OF HENRY THE EIGHTH")  # 1606–1613
PLAY_OFFSET = 40_000  # characters; the shortest play here (The Comedy of Errors) has about 90,000
COMPARISONS = (("language", "english", "italian"), ("form", "verse", "prose"), ("period", "early", "late"))


def _read(path: Path) -> str:
    return gzip.open(path, "rt", encoding="utf-8").read() if path.suffix == ".gz" else path.read_text(encoding="utf-8")


def tatoeba_inputs(path: Path, k: int, chars: int) -> dict[str, list[str]]:
    """k English and k Italian inputs of the same pairs (about ``chars`` characters of English each)."""
    pairs = list({e.strip(): t for e, t in (line.split("\t")[:2] for line in _read(path).splitlines() if "\t" in line)}.items())
    # one Italian translation per English sentence (the file lists several as separate lines)
    per = max(1, len(pairs) // k)
    out = {"english": [], "italian": []}
    for i in range(k):
        chunk = pairs[i * per:(i + 1) * per]
        en, it, size = [], [], 0
        for e, t in chunk:
            en.append(e.strip()), it.append(t.strip())
            size += len(e) + 1
            if size >= chars:
                break
        out["english"].append(" ".join(en))
        out["italian"].append(" ".join(it))
    return out


def _speeches(text: str) -> list[tuple[str, str]]:
    """(speaker, speech lines) of every speech: a line of capitals ending in '.', then lines up to a blank line."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.strip("\n").splitlines()
        if len(lines) >= 3 and re.fullmatch(r"[A-Z][A-Z' .,-]+\.", lines[0].strip()):
            body = [l for l in lines[1:] if not l.strip().startswith("[")]
            if len(body) >= 2:
                out.append((lines[0].strip(), body))
    return out


def _form(body: list[str]) -> str | None:
    starts = [l.strip()[:1] for l in body[1:] if l.strip()]
    upper = np.mean([s.isupper() for s in starts]) if starts else 0.0
    mean_len = np.mean([len(l) for l in body])
    if upper == 1.0 and mean_len < 60:
        return "verse"
    if upper <= 0.5:
        return "prose"
    return None


def shakespeare_inputs(path: Path, k: int, chars: int) -> dict[str, list[str]]:
    """k verse and k prose inputs (speeches from k parts of the works) and k early and k late plays."""
    text = _read(path)
    speeches = _speeches(text)
    out: dict[str, list[str]] = {"verse": [], "prose": [], "early": [], "late": []}
    for form in ("verse", "prose"):
        mine = [f"{who}\n" + "\n".join(body) for who, body in speeches if _form(body) == form]
        per = len(mine) // k
        for i in range(k):
            acc, size = [], 0
            for s in mine[i * per:(i + 1) * per]:
                acc.append(s)
                size += len(s) + 2
                if size >= chars:
                    break
            out[form].append("\n\n".join(acc))
    for period, titles in (("early", EARLY), ("late", LATE)):
        for title in titles[:k]:
            m = re.search(rf"^{re.escape(title)}$", text, re.M)
            if m is None:
                raise SystemExit(f"--shakespeare: no play titled {title!r} in {path}")
            start = m.end() + PLAY_OFFSET  # inside the play: past its persons and first act, before its end
            out[period].append(text[start:start + chars])
    return out


def fit_heads(model, tokenizer, texts: list[str], n: int, target: float) -> tuple[np.ndarray, np.ndarray]:
    """(ŵ, num_pos) of every head on every text: (k, L, H) each."""
    from attnlab.llm.heads.long_capture import capture_long

    ws, nps = [], []
    for t in texts:
        res = capture_long(model, t, tokenizer=tokenizer, max_tokens=n, pool=None)
        if res.n < n:
            raise SystemExit(f"an input has {res.n} tokens, fewer than --tokens {n}: lower --tokens")
        w, num_pos, _ = res.choose(target)
        full = w < 0  # no grid point holds the target: the head needs the whole causal band (ŵ = n − 1, no column)
        ws.append(np.where(full, n - 1, w)), nps.append(np.where(full, 0, num_pos))
    return np.stack(ws), np.stack(nps)


def differs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Heads whose ranges over inputs do not overlap: (L, H) bool; a, b (k, L, H)."""
    return (a.min(0) > b.max(0)) | (b.min(0) > a.max(0))


def chance(a: np.ndarray, b: np.ndarray) -> float:
    """Mean count of ``differs`` over every split of the 2k inputs into two groups of k (the permutation null)."""
    both = np.concatenate([a, b])
    k = len(a)
    counts = [differs(both[list(g)], both[[i for i in range(2 * k) if i not in g]]).sum()
              for g in itertools.combinations(range(2 * k), k)]
    return float(np.mean(counts))


def compare(w: dict, nps: dict) -> list[dict]:
    rows = []
    for name, x, y in COMPARISONS:
        if x not in w or y not in w:
            continue
        d_w, d_np = differs(w[x], w[y]), differs(nps[x], nps[y])
        gap = np.abs(np.median(w[x], 0) - np.median(w[y], 0))
        ls, hs = np.nonzero(d_w)
        listed = sorted(zip(ls.tolist(), hs.tolist()), key=lambda lh: -gap[lh])
        rows.append({
            "comparison": name, "a": x, "b": y, "heads": int(d_w.size),
            "w_differs": int(d_w.sum()), "w_chance": round(chance(w[x], w[y]), 2),
            "wider_in_a": int((w[x].min(0) > w[y].max(0)).sum()), "wider_in_b": int((w[y].min(0) > w[x].max(0)).sum()),
            "num_pos_differs": int(d_np.sum()), "num_pos_chance": round(chance(nps[x], nps[y]), 2),
            "w_spread_median": float(np.median(np.maximum(np.ptp(w[x], 0), np.ptp(w[y], 0)))),
            "heads_w_differs": [{"layer": l, "head": h, x: w[x][:, l, h].tolist(), y: w[y][:, l, h].tolist()} for l, h in listed],
        })
    return rows


def _print(spec: str, w: dict, nps: dict, rows: list[dict], inputs: int, target: float, tokens: int, seconds: float) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{spec}: heads whose ŵ (band half-width at {target:.0%} of the mass) ranges over {inputs} inputs "
            f"do not overlap between conditions, n = {tokens} ({seconds:.0f} s)")
    for c in ("comparison", "heads", "ŵ differs", "wider in a / b", "chance", "num_pos differs", "chance ", "median ŵ spread",
          "mean ŵ a / b", "largest gaps (layer.head: ŵ a | ŵ b)"):
        t.add_column(c, justify="left" if c in ("comparison", "largest gaps (layer.head: ŵ a | ŵ b)") else "right")
    for r in rows:
        x, y = r["a"], r["b"]
        gaps = "; ".join(f"{h['layer']}.{h['head']}: {','.join(map(str, h[x]))} | {','.join(map(str, h[y]))}"
                 for h in r["heads_w_differs"][:4])
        t.add_row(f"{r['comparison']} ({x} vs {y})", str(r["heads"]), str(r["w_differs"]),
              f"{r['wider_in_a']} / {r['wider_in_b']}", f"{r['w_chance']:.1f}",
              str(r["num_pos_differs"]), f"{r['num_pos_chance']:.1f}", f"{r['w_spread_median']:.0f}",
              f"{w[x].mean():.1f} / {w[y].mean():.1f}", gaps)
    Console(width=240).print(t)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--inputs", type=int, default=3, help="inputs per condition")
    ap.add_argument("--target", type=float, default=0.95, help="mass the fit must hold")
    ap.add_argument("--data", type=Path, default=DATA / "tatoeba-en-it" / "test.tsv.gz")
    ap.add_argument("--shakespeare", type=Path, default=DATA / "shakespeare" / "train.txt.gz")
    ap.add_argument("--conditions", default="language,form,period")
    ap.add_argument("--out", type=Path, default=None, help="write the per-head ŵ and num_pos of every input as JSON")
    ap.add_argument("--from-json", type=Path, default=None, help="print the tables of a JSON written by --out (no model run)")
    a = ap.parse_args(argv)
    if a.from_json is not None:
        report = json.loads(a.from_json.read_text(encoding="utf-8"))
        for spec, r in report["models"].items():
            n = report["tokens"]
            w = {c: np.where(np.array(v) < 0, n - 1, np.array(v)) for c, v in r["w"].items()}
            nps = {c: np.where(np.array(r["w"][c]) < 0, 0, np.array(v)) for c, v in r["num_pos"].items()}
            _print(spec, w, nps, compare(w, nps), report["inputs"], report["target"], n, r["seconds"])
        return
    for p, flag in ((a.data, "--data"), (a.shakespeare, "--shakespeare")):
        if not p.is_file():
            raise SystemExit(f"band_by_language: error: {flag} {p}: no such file")
    if a.inputs < 2 or a.tokens < 16 or not 0 < a.target <= 1:
        raise SystemExit("band_by_language: error: need --inputs >= 2, --tokens >= 16 and 0 < --target <= 1")
    from attnlab.option_values import items

    wanted = set(items(a.conditions, "--conditions"))      # no empty or repeated item
    unknown = sorted(wanted - {"language", "form", "period"})
    if unknown:
        raise SystemExit(f"band_by_language: error: --conditions: unknown {unknown[0]!r} (known: language, form, period)")
    models = items(a.models, "--models")
    chars = a.tokens * 8  # enough characters for n tokens in either language
    texts: dict[str, list[str]] = {}
    if "language" in wanted:
        texts.update(tatoeba_inputs(a.data, a.inputs, chars))
    if wanted & {"form", "period"}:
        sh = shakespeare_inputs(a.shakespeare, a.inputs, chars)
        texts.update({c: sh[c] for c in (["verse", "prose"] if "form" in wanted else []) + (["early", "late"] if "period" in wanted else [])})

    from attnlab.llm.models.loading import load_causal_lm

    report = {"command": "python benchmarks/band_by_language.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "tokens": a.tokens, "inputs": a.inputs, "target": a.target, "models": {}}
    for spec in models:
        start = time.perf_counter()
        model, tok = load_causal_lm(spec)
        w, nps = {}, {}
        for cond, ts in texts.items():
            w[cond], nps[cond] = fit_heads(model, tok, ts, a.tokens, a.target)
        rows = compare(w, nps)
        seconds = time.perf_counter() - start
        _print(spec, w, nps, rows, a.inputs, a.target, a.tokens, seconds)
        report["models"][spec] = {"seconds": round(seconds, 1), "comparisons": rows,
                                  "w": {c: v.tolist() for c, v in w.items()}, "num_pos": {c: v.tolist() for c, v in nps.items()}}
        del model
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
        print(a.out)


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)
