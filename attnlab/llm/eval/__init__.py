"""``attnlab eval``: the tasks, the resumable grid of (task, length, depth, method), perplexity, the report."""
