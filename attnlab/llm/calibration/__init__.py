"""Calibration: the model run with exact attention on text, and what the calibrated methods read from it.

    statistics      ``calibrate(model, windows)``: per-head statistics of every option of the grid (``Calibration``)
    plan_error      the output error of an executed option on sampled rows (the knapsack's ``err``)
    mix             synthetic retrieval prompts added to the text, errors on their answer rows (--calibrate-mix)
    pattern_search  MInference's offline search of each head's pattern
    page_ranking    read-back's page scores ranked on one window
    build           the four measurements a list of methods asks for, kept in a file (``attnlab eval``)
    archive         a compact archive read back (``attnlab calibrate``'s output, or one attnlab ships)
    proof           an archive written, and proved to give the full calibration's plans
    shipped         the archives attnlab ships, by model and length

``plans/`` reads a ``Calibration`` (the record) and chooses plans from it; this package runs the model under
``execution/`` to measure it, and imports ``plans/``, never the other way round.
"""
