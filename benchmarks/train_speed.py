"""Training speed: attnlab's Seq2SeqTransformer against torch.nn.Transformer.

Both models have identical sizes (d, H, layers, d_ff, post-LN, dropout), the
same tied embedding, sinusoidal encoding and output projection, and see the
same batches (real sentence lengths from the Tatoeba training file when it is
there, else the synthetic grammar), in one process.  Each training step is
forward + label-smoothed cross-entropy + backward + AdamW.  The two models
alternate in rounds so that load on the machine hits both alike.

    python benchmarks/train_speed.py [--steps 30] [--rounds 3] [--threads 2]

Prints tokens/s of each and the ratio attnlab / torch (target ≥ 0.9).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.config import ModelConfig
from attnlab.nn import Seq2SeqTransformer
from attnlab.nn.embedding import TokenEmbedding, TransformerInput


class TorchReference(nn.Module):
    """torch.nn.Transformer wrapped with the same input and output layers."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        embed = TokenEmbedding(cfg.vocab_size, cfg.d_model)
        self.src_input = TransformerInput(embed, cfg.max_len, cfg.pos_base, cfg.dropout)
        self.tgt_input = TransformerInput(embed, cfg.max_len, cfg.pos_base, cfg.dropout)
        self.core = nn.Transformer(
            d_model=cfg.d_model, nhead=cfg.heads, num_encoder_layers=cfg.layers, num_decoder_layers=cfg.layers,
            dim_feedforward=cfg.ff, dropout=cfg.dropout, batch_first=True, norm_first=False,
        )
        self.out = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.out.weight = embed.weight

    def forward(self, src, tgt_in):
        m = tgt_in.shape[1]
        causal = torch.ones(m, m, dtype=torch.bool).triu(1)  # True = masked, like the padding masks
        src_pad, tgt_pad = src == 0, tgt_in == 0
        h = self.core(
            self.src_input(src), self.tgt_input(tgt_in), tgt_mask=causal, tgt_is_causal=True,
            src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad,
        )
        return self.out(h)


def make_batches(n_batches: int, max_tokens: int, vocab: int, seed: int = 0):
    """Batches with the sentence lengths of real data: (src, tgt_in, tgt_out)."""
    import random

    from attnlab.data import load_corpus

    rng = random.Random(seed)
    try:
        pairs = load_corpus("../shared/data/tatoeba-en-it/train.tsv.gz", split="train")
        source = "tatoeba"
    except Exception:
        pairs = load_corpus("synthetic", split="train")
        source = "synthetic"
    lengths = [(int(len(p.src.split()) * 1.3) + 2, int(len(p.tgt.split()) * 1.3) + 2) for p in pairs]
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        pick = sorted((lengths[rng.randrange(len(lengths))] for _ in range(4096)), key=sum)
        start = rng.randrange(0, len(pick) - 256)
        rows, toks = [], 0
        for n, m in pick[start:]:
            if toks + n + m > max_tokens:
                break
            rows.append((n, m))
            toks += n + m
        B, N, M = len(rows), max(r[0] for r in rows), max(r[1] for r in rows)
        src = torch.zeros(B, N, dtype=torch.long)
        tgt = torch.zeros(B, M + 1, dtype=torch.long)
        for i, (n, m) in enumerate(rows):
            src[i, :n] = torch.randint(4, vocab, (n,), generator=g)
            tgt[i, : m + 1] = torch.randint(4, vocab, (m + 1,), generator=g)
            tgt[i, 0] = 1
        batches.append((src, tgt[:, :-1], tgt[:, 1:]))
    return batches, source


def step_time(model, optimizer, batches) -> tuple[float, int]:
    tokens, t0 = 0, time.perf_counter()
    for src, tgt_in, tgt_out in batches:
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=0, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        tokens += int((src != 0).sum() + (tgt_out != 0).sum())
    return time.perf_counter() - t0, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30, help="steps per round and model")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--ff", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = ModelConfig(vocab_size=args.vocab, d_model=args.d_model, heads=args.heads, layers=args.layers, ff=args.ff)
    torch.manual_seed(0)
    ours, theirs = Seq2SeqTransformer(cfg), TorchReference(cfg)
    models = {"attnlab": ours, "torch.nn.Transformer": theirs}
    params = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-4) for k, m in models.items()}
    batches, source = make_batches(args.steps, args.max_tokens, args.vocab)
    for name, m in models.items():  # warm-up
        m.train()
        step_time(m, opts[name], batches[:3])
    seconds = {k: 0.0 for k in models}
    tokens = {k: 0 for k in models}
    for _ in range(args.rounds):
        for name, m in models.items():
            s, t = step_time(m, opts[name], batches)
            seconds[name] += s
            tokens[name] += t
    tps = {k: tokens[k] / seconds[k] for k in models}
    ratio = tps["attnlab"] / tps["torch.nn.Transformer"]
    result = {"source_lengths": source, "threads": args.threads, "params": params, "tokens_per_s": tps, "ratio": ratio}
    if args.json:
        print(json.dumps(result))
        return
    print(f"batches: {args.steps} × {args.rounds} rounds, ≤ {args.max_tokens} tokens, lengths from {source}; {args.threads} threads")
    for k in models:
        print(f"{k:22s} {params[k]:>11,} parameters  {tps[k]:>9,.0f} tokens/s")
    print(f"ratio attnlab / torch.nn.Transformer = {ratio:.3f}  (target ≥ 0.9)")


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)
