"""``attnlab experiment``: one command that reproduces the thesis's experiment and goes beyond it.

>>> from attnlab.experiment import run_experiment
>>> results = run_experiment("synthetic", "runs/demo", quick=True, force=True)   # doctest: +SKIP
>>> results["evaluate"]["models"]["h8"]["bleu"]                                    # doctest: +SKIP

Stages (``attnlab.experiment.pipeline``): train the 1-head and 8-head models
(``thesis_models``), score them, capture attention and draw Figures 11–12
(``attention``), head roles, the validation Tables 16/17 beside the optimal
fit (``tables``), the automatic per-head (w, num_pos) (``choices``), the
per-language estimate of w (``estimate_w``), spectra (``spectra``), the
mechanisms' speed (``mechanisms_compare``), head surgery (``head_surgery``)
and the report (``attnlab.experiment.report``, rendered by ``attnlab.viz.report``).  Each stage is resumable
(``stages``).
"""

from attnlab.experiment.pipeline import build_stages, run_experiment
from attnlab.experiment.settings import Settings, settings_for

__all__ = ["run_experiment", "build_stages", "Settings", "settings_for"]
