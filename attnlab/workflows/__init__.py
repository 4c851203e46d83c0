"""Workflows: the analysis applied to what the application has — a run folder, a corpus.

``attnlab.analysis`` is pure functions over attention matrices (and the capture
of a model given to it); it imports neither ``attnlab.train`` nor
``attnlab.data``.  The steps that need them live here:

- ``capture_run(run_dir, sentences)``: the ``AttentionMaps`` of a trained run folder;
- ``classify_heads(run_dir=… | hf=…, data=… | conllu=…)``: the roles of every head
  over a corpus (what ``attnlab roles`` does).
"""

from attnlab.workflows.capture_run import capture_run
from attnlab.workflows.classify import classify_heads

__all__ = ["capture_run", "classify_heads"]
