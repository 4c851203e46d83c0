"""Per-head plans: the record (``plan``), the knapsack selection from a calibration (``selection``), the baselines'
plans; what a plan is chosen from is measured by ``attnlab.llm.calibration``."""
