"""Pictures of attention.

- ``heatmap``: a head as a heatmap with tokens on both axes, a layer × head
  grid (shared colour scale option); PNG or SVG through matplotlib (Agg).
- ``explorer``: a self-contained HTML explorer (one file, JavaScript inlined,
  no network): sentence / kind / layer / head, hover values, a lines view and
  role badges.
"""

from attnlab.viz.explorer import explorer_payload, render_explorer, write_explorer
from attnlab.viz.heatmap import plot_grid, plot_head, save_figure

__all__ = ["explorer_payload", "render_explorer", "write_explorer", "plot_grid", "plot_head", "save_figure"]
