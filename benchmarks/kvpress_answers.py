"""kvpress's presses answering attnlab's eval prompts: the half of ``kvpress_eval.py`` that runs in ``.venv-kvpress``.

    .venv-kvpress/bin/python benchmarks/kvpress_answers.py PROMPTS.json ANSWERS.jsonl \\
        --presses snapkv,streaming-llm --compressions 0.75,0.9,0.95 [--split]

Imports nothing from attnlab: ``PROMPTS.json`` (written by ``kvpress_eval.py export``) holds the token ids,
the expected strings, the stop ids and the HF model folder.  What the presses keep, per layer and KV head,
of the n prefilled keys at compression c (kvpress 0.5.5, its defaults; k = max(1, ⌊n(1 − c)⌋) kept):

    snapkv            s_j = avgpool₅( mean_{i ∈ last 64 queries, h ∈ group g} softmax_j(q_i·k_j/√d) ),  j < n − 64
                      keep the last 64 keys (their score is max s + 1) and the top k − 64 of s
    streaming-llm     keep keys 0…3 (sinks) and the last k − 4 keys
    expected-attention  s_j = softmax_j(μ̄·k_j/√d + k_jᵀΣ̄k_j/2d) · ‖v_j‖, μ̄, Σ̄ = mean / covariance of the
                      pre-RoPE queries (the first 4 left out) under the mean RoPE of the next 512
                      positions, averaged over the group; keep keys 0…3 and the top k − 4 of s
    pyramidkv         snapkv with a budget per layer falling linearly with depth (β = 20), the same total
    adakv-snapkv      snapkv's s, one top-(H_kv·k) over all KV heads of a layer (each head keeps ≥ 20 % of k):
                      the cache keeps every key, the evicted ones are masked in decoding

Two ways to feed one eval prompt (kvpress's pipeline takes a context and a question apart):

* ``in context`` (default, as attnlab's methods get it): all n ids are prefilled under the press, the
  question and answer prefix at the end included, and the first answer token comes from that prefill.
* ``--split``: ids[:question_at] are prefilled under the press (``model.model``, as the pipeline does),
  ids[question_at:] (question, chat closing, answer prefix) go through the compressed cache uncompressed,
  positions going on from question_at, as ``KVPressTextGenerationPipeline.generate_answer``.  ``kv_tokens``
  counts the compressed context (decoding also reads the n − question_at question tokens); ``prefill_s``
  includes the question's pass.

Decoding is greedy, positions counted from the uncompressed length, up to the task's max_new tokens,
stopping at attnlab's stop ids (exported) or once every expected string is in the answer (string_match_all
cannot fall after), as ``attnlab.llm.eval.greedy.greedy_answer`` does for attnlab's rows.
Resumable: keys already in ANSWERS.jsonl are skipped.
"""

from __future__ import annotations

import argparse
import json
import time
from importlib.metadata import version
from pathlib import Path

PRESSES = ("snapkv", "streaming-llm", "expected-attention", "pyramidkv", "adakv-snapkv")


def make_press(name: str, compression: float):
    from kvpress import AdaKVPress, ExpectedAttentionPress, PyramidKVPress, SnapKVPress, StreamingLLMPress

    return {"snapkv": lambda: SnapKVPress(compression_ratio=compression),
            "streaming-llm": lambda: StreamingLLMPress(compression_ratio=compression),
            "expected-attention": lambda: ExpectedAttentionPress(compression_ratio=compression),
            "pyramidkv": lambda: PyramidKVPress(compression_ratio=compression),
            "adakv-snapkv": lambda: AdaKVPress(SnapKVPress(compression_ratio=compression))}[name]()


def kv_tokens(model, cache) -> float:
    """Mean keys a (layer, KV head) can still read: the cache's length less AdaKV's masked keys."""
    counts = []
    for layer, block in zip(cache.layers, model.model.layers):
        n, heads = layer.keys.shape[2], layer.keys.shape[1]
        masked = getattr(block.self_attn, "masked_key_indices", None)
        counts.append(n - (len(masked[0]) / heads if masked is not None else 0))
    return sum(counts) / len(counts)


def answer(model, tokenizer, press, p: dict, split: bool, stop: set[int]) -> dict:
    """One greedy answer to prompt ``p`` under ``press`` (see the module's docstring)."""
    import torch
    from transformers import DynamicCache

    ids = p["ids"]
    cut = p["question_at"] if split else len(ids)
    cache = DynamicCache()
    t0 = time.perf_counter()
    with torch.no_grad():
        with press(model):
            if split:
                model.model(input_ids=torch.tensor([ids[:cut]]), past_key_values=cache)
            else:
                out = model(input_ids=torch.tensor([ids]), past_key_values=cache, logits_to_keep=1)
        kept = kv_tokens(model, cache)
        if split:
            out = model(input_ids=torch.tensor([ids[cut:]]), past_key_values=cache,
                        position_ids=torch.arange(cut, len(ids)).unsqueeze(0), logits_to_keep=1)
        prefill_s = time.perf_counter() - t0
        gen: list[int] = []
        t0 = time.perf_counter()
        for i in range(p["max_new"]):
            y = int(out.logits[0, -1].argmax())
            if y in stop:
                break
            gen.append(y)
            text = tokenizer.decode(gen, skip_special_tokens=True).lower()
            if all(e.lower() in text for e in p["expected"]):
                break
            out = model(input_ids=torch.tensor([[y]]), past_key_values=cache, position_ids=torch.tensor([[len(ids) + i]]))
        decode_s = time.perf_counter() - t0
    for block in model.model.layers:  # AdaKV's masks belong to this prompt only
        block.self_attn.masked_key_indices = None
    return {"answer": tokenizer.decode(gen, skip_special_tokens=True), "new_tokens": len(gen), "kv_tokens": kept,
            "prefill_s": round(prefill_s, 4), "decode_s": round(decode_s, 4), "compressed_tokens": cut}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("prompts", type=Path)
    ap.add_argument("answers", type=Path)
    ap.add_argument("--presses", default="snapkv,streaming-llm")
    ap.add_argument("--compressions", default="0.75,0.9,0.95", help="fractions of the KV evicted")
    ap.add_argument("--split", action="store_true", help="the question after compression, as kvpress's pipeline")
    ap.add_argument("--limit", type=int, help="only the first LIMIT prompts (tests)")
    a = ap.parse_args(argv)
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import kvpress  # noqa: F401  (patches the attention functions for AdaKV's masks)

    src = json.loads(a.prompts.read_text())
    from attnlab.option_values import items, numbers

    presses = items(a.presses, "--presses")                # no empty or repeated item
    compressions = numbers(a.compressions, float, "--compressions")
    bad = [x for x in presses if x not in PRESSES]
    if bad:
        ap.error(f"--presses: unknown {bad[0]!r} (known: {', '.join(PRESSES)})")
    transformers.logging.disable_progress_bar()
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(src["model_dir"])
    model = AutoModelForCausalLM.from_pretrained(src["model_dir"], dtype=torch.float32, attn_implementation="sdpa").eval()
    stop = set(src["stop_ids"])  # attnlab's stop ids (its greedy_answer's), so that only the press differs
    done = set()
    if a.answers.exists():
        done = {json.loads(line)["key"] for line in a.answers.read_text().splitlines() if line.strip()}
    a.answers.parent.mkdir(parents=True, exist_ok=True)
    prompts = src["prompts"][: a.limit]
    with open(a.answers, "a", encoding="utf-8") as log:
        for name in presses:
            for c in compressions:
                method = f"kvpress-{name}" + ("-split" if a.split else "")
                budget = round(1 - c, 6)
                for p in prompts:
                    key = f"{method}|{budget:g}|{p['key']}"
                    if key in done or (a.split and p.get("question_at") is None):
                        continue
                    row = {"key": key, "method": method, "press": name, "compression": c, "budget": budget,
                           "question": "after compression" if a.split else "in context",
                           "kvpress": version("kvpress"), "transformers": transformers.__version__,
                           **answer(model, tok, make_press(name, c), p, a.split, stop)}
                    log.write(json.dumps(row) + "\n")
                    log.flush()
                    print(f"{key}: {row['answer']!r} ({row['prefill_s'] + row['decode_s']:.1f} s)", flush=True)


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)
