"""Loading a pretrained causal LM (GGUF wheels, HF folders, hub names), its memory bounds, and text windows of it."""
