"""Everything ``attnlab attention`` writes for some captured sentences, in one folder.

    OUT/attention.safetensors           the AttentionMaps (safetensors + JSON header)
    OUT/grid-s{s}-{kind}.png            layer × head grid of sentence s (shared colour scale)
    OUT/explorer.html                   the self-contained HTML explorer, with role badges

Roles for the badges are computed over the captured sentences themselves.
"""

from __future__ import annotations

import os
from pathlib import Path

from attnlab.analysis.attention_maps import AttentionMaps
from attnlab.viz.explorer import write_explorer
from attnlab.viz.heatmap import plot_grid, save_figure

__all__ = ["write_attention"]


def write_attention(maps: AttentionMaps, out_dir: str | os.PathLike, *, roles=None, max_grids: int = 4) -> list[Path]:
    """Write the maps file, the grid PNGs (first ``max_grids`` sentences) and the explorer; returns the paths."""
    from attnlab.analysis.roles import head_roles

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        from attnlab.errors import UserError

        raise UserError(f"--out: {out} exists and is not a folder")
    roles = head_roles(maps) if roles is None else roles
    written = [maps.save(out / "attention.safetensors")]
    for s in range(min(len(maps), max_grids)):
        for kind in maps.kinds:
            written.append(save_figure(plot_grid(maps, s, kind), out / f"grid-s{s}-{kind}.png"))
    written.append(write_explorer(maps, out / "explorer.html", roles))
    return written
