"""Full attention: the ceiling every other method is measured against."""

from attnlab.llm.methods import register
from attnlab.llm.methods.base import Method


@register
class Full(Method):
    name = "full"
    prefill = "every causal entry j ≤ i (the model's own attention, SDPA)"
    decoding = "the whole KV cache is kept and read"
