"""Per-head plans: the record (``plan``), calibration, the knapsack selection, pattern search, the baselines' plans."""
