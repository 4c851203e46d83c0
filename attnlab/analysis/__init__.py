"""Analysis of attention matrices: pure, vectorised functions over arrays.

Every function takes a batch ``(..., n, m)`` of attention matrices (rows =
queries, columns = keys).  ``families`` draws the thesis's Σ1/Σ2/Σ3 matrices,
``validation`` runs its random-search protocol, ``projection`` is the band space
B_w, ``structured_fit`` the optimal band + columns + sparse fit, ``distances``
the error measures, ``budget`` the automatic choice of (w, num_pos),
``spectrum`` singular values and ranks, ``inputs`` the validation at the
boundary, ``capture`` the ``AttentionMaps`` of a model given to it (or of a
Hugging Face model), ``roles`` what each head does.

This package imports neither ``attnlab.train`` nor ``attnlab.data`` nor the
experiment (``tests/test_layers.py``): what needs a run folder or a corpus is
in ``attnlab.workflows``.
"""
