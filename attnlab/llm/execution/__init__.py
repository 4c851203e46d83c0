"""Running a plan: the execution seam (prefill and a decoding step per layer), the KV cache, pages, kernels' entry."""
