"""docs/results.md, generated from the runs: one section per recipe, each table beside the commands that made it.

    bash benchmarks/recipes/niah-2k.sh                 # measures into runs/niah-2k/ (git-ignored: calibrations, heatmaps)
    python benchmarks/results.py --collect runs        # its small result files → docs/records/niah-2k/, then docs/results.md
    python benchmarks/results.py                       # docs/results.md again from docs/records/ alone (a clean clone)
    python benchmarks/results.py --collect runs/passkey-2k-test=retrieval-formats-2k/passkey-2k-test   # a folder not named after its recipe

A recipe is ``benchmarks/recipes/NAME.sh``: its comment lines say what it measures, its other lines are the
commands, and it writes into ``runs/NAME/`` (sub-folders allowed: one per grid).  ``docs/records/NAME/`` holds the
small files those commands wrote (they are committed, so the document is regenerated anywhere), read as:

    results.jsonl (+ config.json, wall.jsonl)       attnlab eval                 → its table (attnlab.llm.eval.eval_report)
    lost-prompts.jsonl                              attnlab eval-why             → "why lost": its line per prompt, under the table
    speed.jsonl                                     llm_structured.py speed      → mean over the alternated runs, × full
    decode.jsonl                                    llm_structured.py decode     → one row per A/B run (its rounds summed)
    ppl.jsonl, attention.jsonl                      llm_structured.py ppl / attention → one row each
    any other *.jsonl                               a benchmark's --json lines   → one row per line, its fields as columns

The document holds no date and no figure typed by hand: run twice on the same folder it is the same file.
A folder with no runs, a run without its recipe, or a line that is not JSON: one line naming it, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlab.llm.eval.eval_report import markdown, summarise  # noqa: E402
from benchmarks import results_headline  # noqa: E402
from benchmarks.results_overview import README_BEGIN, README_END, in_readme, overview  # noqa: E402,F401

EVAL_FILES = ("results.jsonl", "config.json", "wall.jsonl", "lost-prompts.jsonl")   # attnlab eval's (and eval-why's) small files
BENCH_FILES = ("speed.jsonl", "decode.jsonl", "ppl.jsonl", "attention.jsonl")      # benchmarks/llm_structured.py
MAX_BYTES = 4 << 20                                                # a result file larger than this is not a "small" one


class Refused(Exception):
    """Bad input: one line, exit 2."""


def read_lines(path: Path) -> list[dict]:
    """Every line of a JSON-lines file as a dict; a line that is not a JSON object is refused, naming file:line."""
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise Refused(f"{path}:{i}: not a JSON line ({err.msg})") from None
        if not isinstance(row, dict):
            raise Refused(f"{path}:{i}: not a JSON object")
        rows.append(row)
    return rows


def result_folders(recipe_dir: Path) -> list[Path]:
    """The folders under a recipe's folder (itself included) that hold a result file, in path order."""
    found = {p.parent for p in recipe_dir.rglob("*.jsonl")}
    return sorted(found, key=lambda p: (p != recipe_dir, str(p)))


def recipe_names(runs: Path) -> list[str]:
    """The recipe folders of ``runs`` that hold at least one result file; none: refused."""
    if not runs.is_dir():
        raise Refused(f"{runs}: no such folder of runs")
    names = [d.name for d in sorted(runs.iterdir()) if d.is_dir() and result_folders(d)]
    if not names:
        raise Refused(f"{runs}: no runs (no results.jsonl or other *.jsonl in any folder); run a recipe of benchmarks/recipes/ first")
    return names


# --- a recipe: what it measures, its commands -------------------------------------------------------------------

def read_recipe(path: Path) -> tuple[list[str], list[str]]:
    """(its header: the comment lines after the shebang, as written; its commands: the other lines, continuations joined)."""
    about, commands, pending = [], [], ""
    for line in path.read_text(encoding="utf-8").splitlines():
        s = line.strip()
        if s.startswith("#!") or (not s and not pending):
            continue
        if s.startswith("#") and not pending:
            if not commands:
                about.append(line.rstrip())
            continue
        if s.startswith('cd "$(dirname "$0")') and not pending:
            continue                                        # the recipe's own move to the repository root
        pending += line.rstrip() + "\n"
        if not s.endswith("\\"):
            commands.append(pending.rstrip("\n"))
            pending = ""
    if pending:
        commands.append(pending.rstrip("\n"))
    return about, commands


def first_sentence(about: list[str]) -> str:
    """What a recipe measures, in one line: its header's first sentence (up to '. ' or '; '; a long one up to ': ')."""
    text = " ".join(line.strip().lstrip("#").strip() for line in about)
    for stop in (". ", "; "):
        text = text.split(stop)[0]
    if len(text) > 160:
        text = text.split(": ")[0]
    return text.rstrip(".").replace("|", "/")


# --- the tables --------------------------------------------------------------------------------------------------

def _num(x, spec: str = ".4g") -> str:
    if x is None:
        return "–"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x).replace("|", "\\|")
    if isinstance(x, int) or (spec == ".4g" and abs(x) >= 1e4):
        return f"{x:.0f}"                                        # 16384, not 1.638e+04
    return format(x, spec)


def eval_files(folder: Path) -> list[Path]:
    """attnlab eval's rows: results.jsonl, and the per-rank files of a torchrun grid not folded into it yet."""
    return [p for p in [folder / "results.jsonl"] if p.exists()] + sorted(folder.glob("results.rank*.jsonl"))


def eval_table(folder: Path) -> str:
    """The table ``attnlab eval`` writes into table.md, from the folder's results (every rank's, by key) and wall.jsonl."""
    rows, keys = [], set()
    for r in _eval_rows(folder):
        if r.get("key") not in keys:
            keys.add(r.get("key"))
            rows.append(r)
    walls = _walls(folder)
    if not any(r.get("kind") == "answer" for r in rows):
        raise Refused(f"{eval_files(folder)[0]}: no answer rows (is it attnlab eval's?)")
    summary = summarise(rows, walls)
    text = markdown(summary)
    if (folder / "config.json").exists():
        c = _config(folder)
        short = [f"{r['method']} β={r['budget']:g} ({r['task']}, n = {r['n']}) {r['prompts']} of {_prompts_asked(c, r, rows)} prompts"
                 for r in summary["table"] if not r.get("reference") and r["prompts"] < _prompts_asked(c, r, rows)]
        have = {(r["task"], r["n"], r["method"], r["budget"]) for r in summary["table"]}
        have |= {(t, r["n"], r["method"], r["budget"]) for r in rows if r.get("kind") == "skipped" for t in c.get("tasks", [])}
        asked = [("full", 1.0)] + [(m, float(b)) for m in c.get("methods", []) if m != "full" for b in c.get("budgets", [])]
        short += [f"{m} β={b:g} ({t}, n = {n}) not measured" for t in c.get("tasks", []) for n in c.get("lengths", [])
                  for m, b in asked if (t, n, m, b) not in have]
        if short:   # a grid still running, or stopped: said, not hidden
            text += "\n**Incomplete run**: " + "; ".join(short) + ".\n"
        unused = {"calibrate_windows": c.get("calibrate"), "calibrate_mix": c.get("calibrate"), "ppl_windows": c.get("ppl")}
        shown = [k for k in c if k not in ("format", "tasks", "lengths", "methods", "budgets") and c[k] not in (None, "", [])
                 and unused.get(k, True)]                                          # a count of windows of no text: left out
        text = "settings: " + ", ".join(f"{k} = `{c[k]}`" for k in shown) + "\n\n" + text   # what the table's rows do not say
    return text + why_lost(folder)


def why_lost(folder: Path) -> str:
    """``attnlab eval-why``'s line per lost prompt (lost-prompts.jsonl), as a list under the table; none: nothing."""
    path = folder / "lost-prompts.jsonl"
    from attnlab.schemas.result_row import LOST
    from attnlab.schemas.schema_file import parse

    rows = _schema_read(lambda: [parse(r, LOST, f"{path} row {i}") and r
                                 for i, r in enumerate(read_lines(path) if path.exists() else [], 1)])
    lines = [r["summary"] for r in rows]
    if not lines:
        return ""
    return ("\n**Why lost** (`attnlab eval-why`: per prompt full attention answered and the method lost, the heads of largest "
            "attention mass on the needle's value under full attention, and what the method let each read):\n\n"
            + "\n".join(f"- {line}" for line in lines) + "\n")


def _prompts_asked(cfg: dict, row: dict, rows: list[dict]) -> int:
    """Prompts the run's config asks of one (task, n, method, β): samples × depths (× 1 for a task placed at no depth)."""
    placed = any(r.get("depth") is not None for r in rows if r.get("kind") == "answer" and r.get("task") == row["task"])
    return int(cfg.get("samples", 0)) * (int(cfg.get("depths", 1)) if placed else 1)


def speed_table(path: Path) -> str:
    """llm_structured.py speed: per (n, method, β, threads) the mean over its runs (min–max), and full's ratio."""
    groups = defaultdict(list)
    for r in read_lines(path):
        groups[(r["n"], r["method"], r["budget"], r["threads"])].append(r)
    full = {(n, t): rs for (n, m, b, t), rs in groups.items() if m in ("sdpa", "full")}

    def mean(rs, key):
        return statistics.fmean(r[key] for r in rs)

    def spread(rs, key, spec):
        v = [r[key] for r in rs]
        return f"{statistics.fmean(v):{spec}}" + (f" ({min(v):{spec}}–{max(v):{spec}})" if len(v) > 1 else "")

    lines = ["| n | method | β | threads | runs | prefill s | prefill × full | decode tok/s | decode × full | KV MiB | KV ÷ full | "
             "stored MiB (read back / step) | peak RSS MiB |", "|" + "---|" * 13]
    for (n, m, b, t), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] not in ("sdpa", "full"), kv[0][1], kv[0][2])):
        f = full.get((n, t))
        kv = mean(rs, "kv_bytes_end") / 2**20
        stored = [r.get("store_bytes_end") for r in rs]
        store = f"{statistics.fmean(stored) / 2**20:.1f} ({statistics.fmean(r.get('read_tokens') or 0 for r in rs):.0f})" if all(stored) else "–"
        lines.append(f"| {n} | {m} | {b:g} | {t} | {len(rs)} | {spread(rs, 'prefill_s', '.1f')} | "
                     f"{_num(mean(f, 'prefill_s') / mean(rs, 'prefill_s') if f else None, '.2f')}× | {spread(rs, 'decode_tok_s', '.2f')} | "
                     f"{_num(mean(rs, 'decode_tok_s') / mean(f, 'decode_tok_s') if f else None, '.2f')}× | {kv:.1f} | "
                     f"{_num(mean(f, 'kv_bytes_end') / mean(rs, 'kv_bytes_end') if f else None, '.2f')}× | {store} | {mean(rs, 'peak_rss_mib'):.0f} |")
    return "\n".join(lines) + "\n\n× full: full attention's (SDPA's) mean prefill seconds over the method's, the method's decoding " \
                              "tokens/s over full's, full's KV bytes over the method's — at the same n and threads.\n"


def decode_table(path: Path) -> str:
    """llm_structured.py decode: one row per A/B run (its line for all rounds; each round's line stays in the file): the
    alternated prefills, then the alternated decoding rounds."""
    runs = [r for r in read_lines(path) if r.get("round") == "all"]
    if not runs:
        raise Refused(f"{path}: no line for all rounds (round \"all\"): an A/B run that did not finish")

    def kv(r, who):
        sliding = r.get(f"{who}_kv_tokens_sliding_layers")
        return f"{r[f'{who}_kv_tokens']:,.0f}" + (f" ({sliding:,.0f})" if sliding is not None else "")

    def prefill(r):
        return (f"{r['full_prefill_s']:.1f} / {r['method_prefill_s']:.1f} s: {r['prefill_ratio']:.2f}× "
                f"({r['prefill_ratio_min']:.2f}–{r['prefill_ratio_max']:.2f}, {r['prefills']} rounds)")

    lines = ["| n | method | β | threads | prefill, full / method (× full) | tokens each way | full tok/s | method tok/s | "
             "× full | rounds: min / median / max | keys held, full (sliding layers) | keys held, method (sliding layers) |",
             "|" + "---|" * 12]
    for r in runs:
        lines.append(f"| {r['n']} | {r['method']} | {r['budget']:g} | {r['threads']} | {prefill(r)} | {r['tokens']} | "
                     f"{r['full_tok_s']:.2f} | {r['method_tok_s']:.2f} | {r['ratio']:.2f}× | {r['ratio_min']:.2f} / "
                     f"{r['ratio_median']:.2f} / {r['ratio_max']:.2f} | {kv(r, 'full')} | {kv(r, 'method')} |")
    return "\n".join(lines) + "\n\n× full: full attention's time over the method's, summed over the alternated rounds of one " \
                              "process (prefill: mean seconds a round); keys held after the prefill, summed over layers, per " \
                              "KV head (the read-back store apart).\n"


def ppl_table(path: Path) -> str:
    """llm_structured.py ppl: the last row per (n, method, β, split), and its change from full attention."""
    last = {}
    for r in read_lines(path):
        last[(r["n"], r["method"], r["budget"], r.get("split", "test"))] = r
    full = {(n, s): r["ppl"] for (n, m, b, s), r in last.items() if m == "full"}
    lines = ["| n | split | method | β | entries kept | full heads | windows | perplexity | vs full |", "|" + "---|" * 9]
    for (n, m, b, s), r in sorted(last.items(), key=lambda kv: (kv[0][0], kv[0][3], kv[0][1] != "full", kv[0][2], kv[0][1])):
        rel = f"{100 * (r['ppl'] / full[(n, s)] - 1):+.2f} %" if (n, s) in full else "–"
        lines.append(f"| {n} | {s} | {m} | {b:g} | {r['fraction']:.3f} | {r['full_heads']} | {r['windows']} | {r['ppl']:.3f} | {rel} |")
    return "\n".join(lines) + "\n"


def rows_table(path: Path) -> str:
    """Any other JSON-lines file (a benchmark's --json output): one row per line, the union of its fields as columns."""
    rows = read_lines(path)
    cols = list(dict.fromkeys(k for r in rows for k in r if not isinstance(r[k], (dict, list))))
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_num(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def folder_tables(folder: Path) -> list[tuple[str, str]]:
    """(the file, its table) for every result file of one folder."""
    out = []
    if eval_files(folder):
        out.append((", ".join(p.name for p in eval_files(folder)), eval_table(folder)))
    for name, make in (("speed.jsonl", speed_table), ("decode.jsonl", decode_table), ("ppl.jsonl", ppl_table),
                       ("attention.jsonl", rows_table)):
        if (folder / name).exists():
            out.append((name, make(folder / name)))
    for p in sorted(folder.glob("*.jsonl")):
        if p.name not in EVAL_FILES + BENCH_FILES and p not in eval_files(folder):
            out.append((p.name, rows_table(p)))
    return out


# --- the document ------------------------------------------------------------------------------------------------

def section(name: str, runs: Path, recipes: Path, shown: Path, here: Path) -> str:
    """One recipe's section: what it measures, the recipe's commands, then each result folder's tables."""
    recipe = recipes / f"{name}.sh"
    if not recipe.is_file():
        raise Refused(f"{runs / name}: no recipe {recipe} (every published run names the recipe that made it)")
    about, commands = read_recipe(recipe)
    parts = [f"## {name}\n", first_sentence(about) + ".\n" if about else "",
             f"Recipe: [`{_rel(recipe, shown)}`]({os.path.relpath(recipe, here)}), run from the repository root:\n",
             "```bash\n" + "\n".join(about + commands) + "\n```\n"]
    for folder in result_folders(runs / name):
        for file, table in folder_tables(folder):
            parts.append(f"From `{_rel(folder, shown)}/{file}`:\n\n{table}")
    return "\n".join(p for p in parts if p)


def _rel(path: Path, shown: Path) -> str:
    """``path`` relative to the repository root when it lies inside it (the names a reader can follow), else as given."""
    try:
        return str(path.resolve().relative_to(shown))
    except ValueError:
        return str(path)


def glance(runs: Path, shown: Path = ROOT) -> str:
    """The table of every committed test run of attnlab eval (``results_overview``), "" when there is none."""
    return overview([(f, _config(f), _eval_rows(f), _walls(f))
                     for n in recipe_names(runs) for f in result_folders(runs / n) if eval_files(f)], lambda f: _rel(f, shown))


def eval_folders(runs: Path) -> list[tuple[Path, dict, list[dict], list[dict]]]:
    """(folder, config, result rows, wall rows) of every committed run of attnlab eval."""
    return [(f, _config(f), _eval_rows(f), _walls(f))
            for n in recipe_names(runs) for f in result_folders(runs / n) if eval_files(f)]


def headline(runs: Path, recipes: Path, here: Path, draw_figure: bool = False, docs: Path | None = None) -> str:
    """The headline (benchmarks/results_headline.py) shown in a document of the folder ``here``: its figure is
    ``docs``/img/headline.png (``docs``: results.md's folder, ``here`` by default), drawn when asked."""
    return results_headline.headline(eval_folders(runs), results_headline.decode_runs(runs, recipes, read_lines),
                                      (docs or here) / "img" / "headline.png", here, draw_figure)


def document(runs: Path, recipes: Path, shown: Path = ROOT, here: Path = ROOT / "docs",
             draw_figure: bool = False) -> str:
    """The whole of results.md: the index of recipes, then one section each (``here``: the folder links are relative to)."""
    names = recipe_names(runs)
    head = ["# Results", "",
            f"Generated by `python benchmarks/results.py` from the result files in `{_rel(runs, shown)}/`: do not edit by hand. Each "
            "section is one recipe of `benchmarks/recipes/` (its commands shown), then the tables of what those commands "
            "wrote; rerun the recipe, then `python benchmarks/results.py --collect runs`, to measure it again. Figures that "
            "earlier versions of attnlab measured and no committed run backs are in [archive/earlier-results.md](archive/earlier-results.md).",
            "", "Eval tables (`attnlab eval`): accuracy = mean of RULER's `string_match_all` over the prompts; β measured = "
            "entries read at the prefill over the causal entries; KV tokens kept per (layer, KV head) after the prefill; "
            "“of full” = the method's accuracy on the (length, depth) cells where full attention scores ≥ 80 %, over full's there.",
            "", "| recipe | what it measures |", "|---|---|"]
    for n in names:
        about = read_recipe(recipes / f"{n}.sh")[0] if (recipes / f"{n}.sh").is_file() else []
        head.append(f"| [{n}](#{n}) | {first_sentence(about)} |")
    table = glance(runs, shown)
    sections = "\n".join(section(n, runs, recipes, shown, here) for n in names)   # every run read before the figure:
    top = headline(runs, recipes, here, draw_figure)                              # a refused run leaves none drawn
    head[2:2] = ["## Headline", "", top] if top else []
    return "\n".join(head) + "\n\n" + ("## At a glance\n\n" + table + "\n" if table else "") + sections


def _config(folder: Path) -> dict:
    """An eval folder's config.json ({} when it has none), through its schema (``attnlab.schemas.eval_config``)."""
    from attnlab.schemas import eval_config

    cfg = folder / "config.json"
    return _schema_read(lambda: eval_config.load(cfg).model_dump()) if cfg.exists() else {}


def _eval_rows(folder: Path) -> list[dict]:
    """Every row of an eval folder's results files (every rank's): each line JSON (``read_lines``: a torn one is
    refused, an unfinished run), then each row through its schema (``attnlab.schemas.result_row.ROW``)."""
    from attnlab.schemas.result_row import ROW
    from attnlab.schemas.schema_file import parse

    return _schema_read(lambda: [parse(r, ROW, f"{p} row {i}") and r for p in eval_files(folder)
                                 for i, r in enumerate(read_lines(p), 1)])


def _walls(folder: Path) -> list[dict]:
    """The lines of an eval folder's wall.jsonl, each through its schema (``result_row.WALL``)."""
    from attnlab.schemas.result_row import WALL
    from attnlab.schemas.schema_file import parse

    path = folder / "wall.jsonl"
    return _schema_read(lambda: [parse(r, WALL, f"{path} row {i}") and r
                                 for i, r in enumerate(read_lines(path) if path.exists() else [], 1)])


def _schema_read(read):
    """``read()``; a file its schema refuses is one refusal line naming file and field (the copy then undone)."""
    from attnlab.errors import UserError

    try:
        return read()
    except UserError as err:
        raise Refused(str(err)) from None


def collect(spec: str, runs: Path, recipes: Path) -> list[tuple[Path, Path]]:
    """The small result files to copy into ``runs``, as (file, its copy), each run checked (nothing copied yet).  ``spec`` = DIR: ``DIR/NAME/`` → ``runs/NAME/`` for every NAME that has a
    recipe; ``spec`` = SRC=RECIPE[/PART]: the run folder SRC → ``runs/RECIPE[/PART]/`` (a recipe whose folders are not
    named after it)."""
    from attnlab.errors import UserError
    from attnlab.option_paths import contained

    source, _, dest = spec.partition("=")
    source = Path(source)
    if not source.is_dir():
        raise Refused(f"--collect {source}: no such folder")
    if dest:
        recipe = dest.split("/")[0]
        if not (recipes / f"{recipe}.sh").is_file():
            raise Refused(f"--collect {spec}: no recipe {recipes / (recipe + '.sh')}")
        if any(part in ("", ".", "..") for part in dest.split("/")):
            raise Refused(f"--collect {spec}: RECIPE/PART is a path inside --runs {runs}, without '.', '..' or '//'")
        try:
            contained("--collect", runs / dest, runs / recipe, "the recipe's folder of --runs")   # links resolved too
        except UserError as err:
            raise Refused(str(err)) from None
        pairs = [(source, runs / dest)]
    else:
        pairs = [(d, runs / d.name) for d in sorted(source.iterdir()) if d.is_dir() and (recipes / f"{d.name}.sh").is_file()]
    copied = []
    for src, dst in pairs:
        for folder in result_folders(src):
            folder_tables(folder)                                        # a torn, foreign or incomplete run: refused before copying
            for p in sorted(folder.iterdir()):
                if p.is_file() and (p.suffix == ".jsonl" or p.name == "config.json") and p.stat().st_size <= MAX_BYTES:
                    copied.append((p, dst / p.relative_to(src)))
    if not copied:
        raise Refused(f"--collect {spec}: no runs of a recipe of {recipes} (runs/NAME/ for benchmarks/recipes/NAME.sh)")
    return copied


def copy_files(pairs: list[tuple[Path, Path]]) -> list[tuple[Path, bytes | None]]:
    """Copy each file to its place; returns what each place held before (None: nothing), for ``restore``."""
    before = []
    for p, dest in pairs:
        before.append((dest, dest.read_bytes() if dest.is_file() else None))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dest)
    return before


def restore(before: list[tuple[Path, bytes | None]], runs: Path) -> None:
    """Undo ``copy_files``: the files it replaced written back, those it added removed with the folders it left
    empty (up to ``runs``): a run refused after the copy leaves ``runs`` as it was."""
    for dest, old in reversed(before):
        if old is not None:
            dest.write_bytes(old)
            continue
        dest.unlink(missing_ok=True)
        folder = dest.parent
        while folder != runs and runs in folder.parents and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent


def check_paths(args) -> None:
    """Every path argument checked before anything is read or written (one line naming the option)."""
    from attnlab.errors import UserError
    from attnlab.option_paths import input_file, output_file, output_folder

    try:
        if args.collect:                                                  # --runs is written: new, or a folder
            output_folder("--runs", args.runs)
        for option, folder in (("--runs", args.runs), ("--recipes", args.recipes))[bool(args.collect):]:
            if not folder.is_dir():
                raise UserError(f"{option} {folder}: " + ("is not a folder" if folder.exists() else "no such folder"))
        output_file("--out", args.out)
        if args.readme.exists():
            input_file("--readme", args.readme)
            output_file("--readme", args.readme)
    except UserError as err:
        raise Refused(str(err)) from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, default=ROOT / "docs" / "records", help="the recipes' result folders [docs/records]")
    ap.add_argument("--recipes", type=Path, default=ROOT / "benchmarks" / "recipes", help="the recipes [benchmarks/recipes]")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results.md", help="the document written [docs/results.md]")
    ap.add_argument("--readme", type=Path, default=ROOT / "README.md",
                    help="a README whose generated block (between the results_overview markers) gets the first table [README.md]")
    ap.add_argument("--collect", action="append", default=[], metavar="DIR|SRC=RECIPE[/PART]",
                    help="first copy the small result files of DIR/NAME/ (e.g. runs), or of the run folder SRC as RECIPE's "
                         "(PART: a sub-folder), into --runs; may be given more than once")
    args = ap.parse_args(argv)
    before = []
    try:
        check_paths(args)                                                 # --runs, --recipes, --out, --readme
        pairs = [pair for spec in args.collect for pair in collect(spec, args.runs, args.recipes)]   # every spec checked first
        before = copy_files(pairs)
        text = document(args.runs, args.recipes, here=args.out.resolve().parent, draw_figure=True)
    except Refused as err:
        restore(before, args.runs)                                        # a refusal after the copy: the copy undone
        print(f"results.py: error: {err}", file=sys.stderr)
        return 2
    except (KeyError, TypeError) as err:   # a line without a field its table needs
        restore(before, args.runs)
        print(f"results.py: error: {args.runs}: a result line lacks the field {err}", file=sys.stderr)
        return 2
    if before:
        print(f"{len(before)} result files copied into {args.runs}")
    writes = [(args.out, text)]
    if args.readme.is_file():
        readme = args.readme.read_text(encoding="utf-8")
        shown = in_readme(readme, glance(args.runs))
        shown = results_headline.in_readme(shown, headline(args.runs, args.recipes, args.readme.resolve().parent,
                                                           docs=args.out.resolve().parent))
        if shown != readme:
            writes.append((args.readme, shown))
    for path, body in writes:
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_text(body, encoding="utf-8")
            tmp.replace(path)
        except OSError as err:                                            # said with its option, not as [Errno …]
            tmp.unlink(missing_ok=True)
            option = "--out" if path == args.out else "--readme"
            print(f"results.py: error: {option} {path}: cannot be written ({err.strerror})", file=sys.stderr)
            return 2
    print(f"wrote {args.out} ({len(recipe_names(args.runs))} recipes, {text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)
