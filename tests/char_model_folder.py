"""A tiny Hugging Face model folder with a one-character-per-token tokenizer (tests import this)."""

from __future__ import annotations


def save_with_char_tokenizer(model, folder):
    """``folder`` holding ``model`` and a WordLevel tokenizer over printable ASCII (one token a character)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {chr(c): c - 32 for c in range(32, 127)}
    vocab["[UNK]"] = 95
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]").save_pretrained(folder)
    model.save_pretrained(folder)
    return folder


def tiny_llama_folder(folder, seed: int = 0):
    """``folder`` holding a random 2-layer Llama (4 query / 2 KV heads, d = 32, 2,048 positions; torch seeded with
    ``seed``) and the one-character tokenizer: the tests' stand-in for SmolLM2."""
    import torch
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=2048)
    return save_with_char_tokenizer(transformers.LlamaForCausalLM(cfg).eval(), folder)
