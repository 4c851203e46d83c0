"""attnlab's plan that keeps what the context says: every part composed (``parts``), and the presets made of it.

    attnlab-retrieval = retrieval-tails + key-blocks + other-blocks + band-floor + voted-cache + read-back
                        (+ decode-band, slash-lines: experimental)

Each part is one file of ``attnlab/llm/methods/parts/`` with its options, its share of β and what it does in a
sliding layer; ``attnlab`` — the recommended default — is this composition with the values below.
"""

from attnlab.llm.methods import register, register_preset
from attnlab.llm.methods.parts import EVERY, ComposedPlan
from attnlab.llm.methods.parts.retrieval_tails import TAIL

__all__ = ["AttnlabRetrieval", "TAIL"]


@register
class AttnlabRetrieval(ComposedPlan):
    name = "attnlab-retrieval"
    parts = EVERY
    prefill = ("the k heads of largest retrieval score read every key from their last T rows (T = 0: all rows; "
               "blocks=K: and on every row the K key blocks of 16 of largest pooled score); every head its planned "
               "band + columns (knapsack over the rest of β); slashes=s: and s per-input diagonals; other_blocks=K': "
               "the other planned heads K' key blocks of 16 per block of 16 queries")
    decoding = ("retrieval heads read (and their KV heads keep) the whole cache (tail_keep=P: their band, columns and "
                "the P keys their tail rows attended most); the others keep what their support can still read "
                "(other_blocks: and the keys of the blocks their last query block chose; pages=K: and read back the K "
                "pages of evicted keys of largest bound; slash lines are not read at decoding; decode_band=c: every "
                "band at most c keys)")


register_preset("attnlab", "attnlab-retrieval", "the recommended default: retrieval, perplexity and KV together",
                default=True, retrieval_heads=32, blocks=8, other_blocks=4, tail_keep=512, pages=16,
                sliding_floor=384, page_score="calibrated", band_floor=8)
register_preset("attnlab-bound", "attnlab-retrieval", "attnlab with its pages read back by Quest's bound alone on "
                "every model, sliding bands of at least 128 keys and no band floor",
                retrieval_heads=32, blocks=8, other_blocks=4, tail_keep=512, pages=16, sliding_floor=128)
register_preset("attnlab-other-blocks", "attnlab-retrieval", "multi-key retrieval with whole caches for the "
                "retrieval heads (more KV than attnlab, no read-back)", retrieval_heads=32, blocks=8, other_blocks=4)
register_preset("attnlab-key-blocks", "attnlab-retrieval", "key blocks in the retrieval heads only (multi-key at 2K; "
                "perplexity of the band plan)", retrieval_heads=32, blocks=8)
