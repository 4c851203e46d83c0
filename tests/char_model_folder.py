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
