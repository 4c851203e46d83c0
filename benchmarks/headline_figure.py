"""The headline figure of the results: retrieval accuracy at equal KV bytes (resident + stored), a panel per model.

The shape of kvpress's leaderboard (score against compression ratio): for each model, every method is a point

    x = Σ (kv_bytes_m + kv_store_bytes_m) / Σ kv_bytes_full   (what it keeps: the cache resident after the prefill
                                                                plus what it stores aside to read back at decoding,
                                                                over full attention's resident cache, same prompts)
    y = found_m / prompts_m                 with its 95 % Wilson interval as a bar (attnlab/llm/eval/wilson.py)

on the test rows that every plotted method ran (a method run on fewer than 80 % of the model's rows is left out, and
said in the caption).  At equal x every method holds the same bytes, so attnlab's accuracy reads against every
baseline's at its own total; a method that keeps evicted keys aside (attnlab's read-back store) also gets a hollow
point at its resident bytes alone, Σ kv_bytes_m / Σ kv_bytes_full, joined by a dotted line.  Full attention's
accuracy and interval are the grey band.  The figure is drawn from the committed records alone (no machine speed
enters it) and written without a timestamp, so the same records give the same file.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.results_summary import SHORT, Tally, method_tallies

__all__ = ["panel_data", "points", "draw", "XLABEL"]

COVERAGE = 0.8   # a method is plotted when it ran on at least this share of the model's test rows
STYLE = {"full": ("black", "s"), "attnlab": ("tab:red", "o"), "oracle-topk": ("tab:gray", "D")}
XLABEL = "KV bytes over full attention's: resident + stored aside\n(hollow: resident alone)"


def panel_data(cells: dict, model: str) -> tuple[dict[str, Tally], dict[str, Tally], int, list[str]]:
    """(method → tally on the common rows, method → full's tally there, rows, methods left out) for one model."""
    rows = [row for row, by in cells.items() if row[0] == model and "full" in by]
    counts: dict[str, int] = {}
    for row in rows:
        for m in cells[row]:
            counts[m] = counts.get(m, 0) + 1
    plotted = sorted(m for m, c in counts.items() if c >= COVERAGE * len(rows))
    left_out = sorted(m for m in counts if m not in plotted)
    common = {row: cells[row] for row in rows if all(m in cells[row] for m in plotted)}
    both = method_tallies(common, model)
    return {m: both[m][0] for m in plotted}, {m: both[m][1] for m in plotted}, len(common), left_out


def points(tallies: dict[str, Tally], fulls: dict[str, Tally]) -> dict[str, tuple[float, float]]:
    """{method: (x, resident)}: its resident + stored bytes and its resident bytes alone, over full attention's resident
    bytes on the same prompts (module docstring)."""
    return {m: ((t.kv_bytes + t.store_bytes) / fulls[m].kv_bytes, t.kv_bytes / fulls[m].kv_bytes)
            for m, t in tallies.items()}


def draw(cells: dict, path: Path, write: bool = True) -> str:
    """Draw the figure into ``path`` (PNG; ``write=False``: nothing written); returns its caption (Markdown)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted({row[0] for row in cells}, key=lambda m: (m != "smollm2-135m", m))
    fig, axes = plt.subplots(1, len(models), figsize=(5.2 * len(models), 4.2), sharey=True, squeeze=False)
    notes = []
    palette = iter(["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
                    "tab:cyan"])
    colours: dict[str, tuple[str, str]] = {}
    for ax, model in zip(axes[0], models):
        tallies, fulls, n_rows, left_out = panel_data(cells, model)
        full = tallies["full"]
        right = 1.0
        lo, hi = full.interval()
        ax.axhspan(lo, hi, color="0.88", zorder=0)
        ax.axhline(full.accuracy, color="0.5", lw=1, ls="--", zorder=1)
        xs = points(tallies, fulls)
        for m, t in sorted(tallies.items(), key=lambda kv: kv[0] != "full"):
            if m not in colours:
                colours[m] = STYLE.get(m, (next(palette), "o"))
            colour, marker = colours[m]
            x, resident = xs[m]
            right = max(right, x)
            lo, hi = t.interval()
            ax.errorbar([x], [t.accuracy], yerr=[[t.accuracy - lo], [hi - t.accuracy]], fmt=marker, color=colour,
                        capsize=4, ms=7, label=m, zorder=3)
            if t.store_bytes:   # its resident bytes alone: hollow, joined to its total
                ax.plot([resident, x], [t.accuracy] * 2, ls=":", color=colour, zorder=2)
                ax.plot([resident], [t.accuracy], marker=marker, mfc="white", color=colour, ms=7, zorder=4)
        ax.set_title(f"{SHORT.get(model, model)}: {full.prompts} prompts a method, {n_rows} test rows")
        ax.set_xlabel(XLABEL)
        ax.set_xlim(0, max(1.05, right + 0.05))
        ax.grid(alpha=0.3)
        if left_out:
            notes.append(f"{SHORT.get(model, model)} leaves out {', '.join(f'`{m}`' for m in left_out)} "
                         f"(run on fewer than {100 * COVERAGE:.0f} % of its test rows)")
    axes[0][0].set_ylabel("prompts found (95 % Wilson interval)")
    axes[0][0].set_ylim(0, 1.02)
    handles, labels = [], []
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.png")
        fig.savefig(tmp, dpi=110, metadata={"Software": None})
        tmp.replace(path)
    plt.close(fig)
    caption = ("Retrieval accuracy at equal KV bytes, every committed test run of `attnlab eval` (both models "
               "4-bit GGUF files dequantised to float32; β = 10 %). x: the bytes a method keeps, its KV cache resident "
               "after the prefill plus what it stores aside to read back at decoding (attnlab's evicted pages), over "
               "full attention's resident cache on the same prompts; hollow point: the resident bytes alone. Bars: "
               "95 % Wilson intervals; grey band: full attention's interval.")
    return caption + ((" " + "; ".join(notes) + ".") if notes else "")
