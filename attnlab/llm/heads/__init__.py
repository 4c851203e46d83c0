"""Every head of an LLM on long input: streamed capture, per-head statistics, detectors, the explorer's data."""
