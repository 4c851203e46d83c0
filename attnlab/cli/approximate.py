"""``attnlab approximate`` and ``attnlab sweep``: the structured formulation of attention, per head.

    attnlab approximate INPUT --w 3 --num-pos 2 [--sparse S] [--attempts 30] [--seed N] [--json] [--renormalize]
    attnlab sweep INPUT --w 0..10 --num-pos 0..4 [--sparse S] [--out DIR] [--renormalize]

INPUT: a ``.npy``/``.npz`` array (n, n) or (H, n, n), or an attnlab attention
file (``.safetensors``, or a folder holding one).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Optional

import typer

from attnlab.cli.options import checked
from attnlab.errors import UserError


def int_list(text: str) -> list[int]:
    """'0..10' (inclusive), '0,2,4' or '3' -> list of ints (the format of sweep's --w and --num-pos; options.RULES)."""
    return _int_list(text, "")


def _int_list(text: str, name: str) -> list[int]:
    """'0..10' (inclusive), '0,2,4' or '3' -> list of ints; ValueError naming the option."""
    from attnlab.option_values import number, numbers

    option, name = name or "value", f"{name}: " if name else ""
    try:
        if ".." in text:
            lo, hi = text.split("..", 1)
            values = list(range(number(lo, int, option), number(hi, int, option) + 1))
        else:
            values = numbers(text, int, option)   # canonical integers, no empty or repeated item
    except UserError as err:
        raise ValueError(f"{name}expected a range like 0..10 or a list like 0,2,4, got {text!r} "
                         f"({str(err).removeprefix(option + ': ')})") from None
    if not values:
        raise ValueError(f"{name}empty range {text!r}")
    return values


def _echo_warnings(caught) -> None:
    for w in caught:
        typer.echo(f"attnlab: warning: {' '.join(str(w.message).split())}", err=True)


def _approximate_long(hf, file, w, num_pos, tokens, block_rows, layers, target, memory_gib, as_json,
                      run_dir=None) -> None:
    """``attnlab approximate --hf MODEL --file TEXT`` (or ``RUN_DIR --file TEXT``):
    the streamed fit table of every head."""
    from attnlab.cli.attention import check_tokens, long_source
    from attnlab.llm.heads.head_statistics import DEFAULT_WS
    from attnlab.llm.heads.long_capture import DEFAULT_NUM_POS, capture_long, parse_layers
    from attnlab.llm.heads.report import summary
    from attnlab.llm.models.text_windows import read_text

    if not 0 < target <= 1:
        raise ValueError(f"--target: expected a mass share in (0, 1], got {target}")
    if w < 0 or num_pos < 0:
        raise ValueError(f"--w/--num-pos: expected integers >= 0, got {w}, {num_pos}")
    ws = tuple(sorted(set(DEFAULT_WS) | {w}))
    nps = tuple(sorted(set(DEFAULT_NUM_POS) | {num_pos}))
    layer_list = parse_layers(layers)  # options first: nothing is loaded for a typo
    check_tokens(hf, tokens)
    text = read_text(file)
    res = capture_long(long_source(run_dir, hf), text, max_tokens=tokens, block_rows=block_rows, layers=layer_list,
                       ws=ws, num_pos=nps, memory_limit=None if memory_gib is None else int(memory_gib * 2**30))
    if w not in res.fit.ws:
        raise ValueError(f"--w: must be below the number of tokens {res.n}, got {w}")
    a, b = res.fit.ws.index(w), res.fit.num_pos.index(num_pos)
    bw, bk, be = res.choose(target)
    causal = res.n * (res.n + 1) / 2
    H = res.profile.shape[1]
    rows = []
    for x, role in enumerate(res.roles):
        l, h = divmod(x, H)
        rows.append({"layer": role.layer, "head": h, "layer_type": res.layer_types[l], "role": role.role,
                     "mass_captured": round(float(res.fit.mass_captured[l, h, a, b]), 6),
                     "l1": round(float(res.fit.l1[l, h, a, b]), 4),
                     "entries": round(float(res.fit.entries[l, h, a, b]) / causal, 6),
                     "best_w": int(bw[l, h]), "best_num_pos": int(bk[l, h]),
                     "best_entries": round(float(be[l, h]) / causal, 6) if be[l, h] >= 0 else None})
    s = summary(res, target)
    if as_json:
        typer.echo(json.dumps({"summary": s, "w": w, "num_pos": num_pos, "heads": rows}, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{res.name}: {res.n} tokens, band w = {w} + {num_pos} columns (s = 0); "
                        f"cheapest grid point for {target:.0%}")
    for col in ("layer", "head", "type", "role", "mass", "ℓ1", "entries", f"w ({target:.0%})", "num_pos", "entries "):
        table.add_column(col, justify="right")
    for r in rows:
        best = r["best_w"] >= 0
        table.add_row(str(r["layer"]), str(r["head"]), r["layer_type"].split("_")[0], r["role"],
                      f"{r['mass_captured']:.1%}", f"{r['l1']:.1f}",
                      f"{r['entries']:.2%}", str(r["best_w"]) if best else "full",
                      str(r["best_num_pos"]) if best else "", f"{r['best_entries']:.2%}" if best else "")
    table.caption = "entries: share of the n(n+1)/2 causal entries stored"
    Console(width=max(Console().width, 110)).print(table)
    need = s["share needing more than band + 4 columns"]
    typer.echo(f"heads needing more than a band + 4 columns for {target:.0%} of the mass: "
               + ", ".join(f"{k}: {v:.1%}" for k, v in need.items()))
    typer.echo(f"{s['tokens']} tokens in {s['seconds']} s, peak memory {s['peak']} (estimated {s['estimate']})")


@checked("approximate")
def approximate_command(
    input: Optional[Path] = typer.Argument(None,
                                           help="attention heads: .npy/.npz (n,n) or (H,n,n), "
                                                "or an attnlab attention file; with --file: a language-model RUN_DIR "
                                                "(or --hf)"),
    w: int = typer.Option(3, "--w", help="band half-width w (0 <= w < n)"),
    num_pos: int = typer.Option(2, "--num-pos", help="number of key columns (0 <= num_pos <= n)"),
    sparse: Optional[int] = typer.Option(None, "--sparse", help="sparse entries s of the optimal fit [default: n]"),
    attempts: int = typer.Option(30, "--attempts", help="random draws per family (thesis protocol)"),
    seed: int = typer.Option(0, "--seed", help="seed of the random search"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON list, one object per head"),
    renormalize: bool = typer.Option(False, "--renormalize", help="divide rows that do not sum to 1 by their sum"),
    hf: Optional[str] = typer.Option(None, "--hf",
                                     help="with --file: a causal LM (known name, HF folder, hub name or .gguf)"),
    file: Optional[Path] = typer.Option(None, "--file",
                                        help="a long text (.txt/.txt.gz): the exact band + columns fit of every head, "
                                             "streamed"),
    tokens: Optional[int] = typer.Option(None, "--tokens", help="with --file: keep the first N tokens"),
    block_rows: Optional[int] = typer.Option(None, "--block-rows", help="with --file: query rows per block"),
    layers: Optional[str] = typer.Option(None, "--layers", help="with --file: layers to analyse, e.g. 0-3"),
    target: float = typer.Option(0.95, "--target", help="with --file: mass each head's chosen (w, num_pos) must hold"),
    memory_gib: Optional[float] = typer.Option(None, "--memory-limit",
                                               help="with --file: refuse a run estimated above this many GiB"),
) -> None:
    """Thesis random search (Σ1, Σ2(w), Σ3) beside the optimal band + columns + sparse fit, per head.

    With RUN_DIR --file TEXT (an attnlab LM run) or --hf MODEL --file TEXT: the exact band + num_pos columns fit (s = 0)
    of every head of the model over the long text, streamed (no n x n matrix), at --w/--num-pos and over a grid; per
    head the cheapest grid point holding --target of the mass.
    """
    from attnlab.analysis.attention_file import load_heads
    from attnlab.analysis.comparison import compare_fits
    from attnlab.cli.attention import check_file_only

    check_file_only(file, tokens=tokens, block_rows=block_rows, layers=layers, memory_gib=memory_gib)
    if file is not None or hf is not None:
        if file is None:
            raise UserError("--hf needs --file TEXT (a long text file)")
        if input is not None and hf is not None:
            raise UserError("give INPUT (a language-model RUN_DIR with --file) or --hf MODEL --file TEXT, not both")
        _approximate_long(hf, file, w, num_pos, tokens, block_rows, layers, target, memory_gib, as_json,
                          run_dir=None if input is None else str(input))
        return
    if input is None:
        raise UserError("give INPUT (attention heads) or --hf MODEL --file TEXT")

    heads, _labels = load_heads(input)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = compare_fits(heads, w, num_pos, sparse, n_attempts=attempts, seed=seed, renormalize=renormalize,
                            name=str(input))
    _echo_warnings(caught)
    if as_json:
        clean = [{k: (v if not (isinstance(v, float) and not math.isfinite(v)) else None) for k, v in r.items()}
                 for r in rows]
        typer.echo(json.dumps(clean, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    n = heads.shape[-1]
    s = n if sparse is None else sparse
    table = Table(title=f"{input.name}: {len(rows)} heads, n = {n}, w = {w}, num_pos = {num_pos}, s = {s}, "
                        f"{attempts} draws/family")
    # thesis columns (random search) | optimal fit
    for col, style in (("Head_n", "bold"), ("Min_distance", "red"), ("Mean Error", "red"), ("opt. dist", "green"),
                       ("opt. Mean Err", "green"), ("ratio", "bold cyan"), ("mass", ""), ("stored", "")):
        table.add_column(col, justify="right", style=style, no_wrap=True)
    table.caption = ("red: thesis random search (Σ1, Σ2(w), Σ3) · green: optimal fit · "
                     "ratio = Mean Error / opt. Mean Err · mass captured · stored entries")
    for r in rows:
        table.add_row(str(r["head"]), f"{r['random_min_distance']:.2f}", f"{r['random_mean_error']:.4f}",
                      f"{r['optimal_distance']:.3f}",
                      f"{r['optimal_mean_error']:.5f}", f"{r['ratio']:.1f}×", f"{r['mass_captured']:.1%}",
                      str(r["stored_entries"]))
    mean = lambda k: sum(r[k] for r in rows) / len(rows)  # noqa: E731
    ratio = mean("random_mean_error") / mean("optimal_mean_error") if mean("optimal_mean_error") > 0 else math.inf
    table.add_section()
    table.add_row("mean", f"{mean('random_min_distance'):.2f}", f"{mean('random_mean_error'):.4f}",
                  f"{mean('optimal_distance'):.3f}",
                  f"{mean('optimal_mean_error'):.5f}", f"{ratio:.1f}×", f"{mean('mass_captured'):.1%}",
                  f"{mean('stored_entries'):.0f}")
    console = Console()
    (console if console.width >= 110 else Console(width=110)).print(table)
    zero = float(n if renormalize else heads.sum((-2, -1)).mean())  # ‖A − 0‖₁ = Σ a_ij (= n when rows sum to 1)
    typer.echo(f"zero matrix for reference: ‖A − 0‖₁ = Σ a_ij = {zero:.2f} per head on average "
               f"(mean error {zero / (n * n):.4f}); dense budget n² = {n * n}")


@checked("sweep")
def sweep_command(
    input: Path = typer.Argument(..., help="attention heads: .npy/.npz (n,n) or (H,n,n), or an attnlab attention file"),
    w: Optional[str] = typer.Option(None, "--w", help="half-widths: 0..10, 0,2,4 or 3 [default: 0..min(10, n-1)]"),
    num_pos: str = typer.Option("0..4", "--num-pos", help="column counts: 0..4, 0,2 or 1"),
    sparse: Optional[int] = typer.Option(None, "--sparse", help="sparse entries s [default: n]"),
    out: Path = typer.Option(Path("."), "--out", help="folder for sweep.csv and sweep.png"),
    renormalize: bool = typer.Option(False, "--renormalize", help="divide rows that do not sum to 1 by their sum"),
    force: bool = typer.Option(False, "--force", help="replace sweep.csv and sweep.png of an earlier sweep in --out"),
) -> None:
    """Error surface of the optimal fit over a (w, num_pos) grid: CSV + PNG heat map."""
    from attnlab.analysis.attention_file import load_heads
    from attnlab.analysis.error_surface import sweep
    from attnlab.outputs import claim_files

    claim_files({"sweep-csv": out / "sweep.csv", "png": out / "sweep.png"}, inputs=[("INPUT", input)], force=force,
                option="--out", new_folder=True)
    heads, _labels = load_heads(input)
    n, m = heads.shape[-2:]
    ws = list(range(0, min(10, max(n, m) - 1) + 1)) if w is None else _int_list(w, "--w")
    ps = _int_list(num_pos, "--num-pos")
    from attnlab.support import check_num_pos, check_w

    ws, ps = [check_w(x, max(n, m)) for x in ws], [check_num_pos(x, m) for x in ps]  # ValueError "w: …" → "--w: …"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows, csv_path, png_path = sweep(heads, ws, ps, out, sparse, renormalize=renormalize, name=str(input))
    _echo_warnings(caught)
    lo = min(rows, key=lambda r: r["mean_error"])
    hi = max(rows, key=lambda r: r["mean_error"])
    typer.echo(f"wrote {csv_path} and {png_path}: {len(rows)} grid points over {heads.shape[0]} heads; mean error "
               f"from {hi['mean_error']:.5f} at w={hi['w']}, num_pos={hi['num_pos']} "
               f"({hi['stored_entries']:.0f} stored entries) "
               f"down to {lo['mean_error']:.5f} at w={lo['w']}, num_pos={lo['num_pos']} ({lo['stored_entries']:.0f})")


def register(app: typer.Typer) -> None:
    app.command("approximate")(approximate_command)
    app.command("sweep")(sweep_command)
