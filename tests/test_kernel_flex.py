"""The structured support through PyTorch's FlexAttention: its BlockMask (everywhere) and the `structured`
mechanism's training path (forward and backward, CUDA only; skipped with the reason elsewhere)."""

from __future__ import annotations

import pytest
import torch

from attnlab.support import Support


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the FlexAttention training path of `structured` runs only on CUDA")
@pytest.mark.parametrize("causal", [False, True])
def test_structured_on_cuda_runs_flex_attention_forward_and_backward(causal):
    from attnlab.nn.mask import Mask
    from attnlab.nn.mechanisms import Structured

    torch.manual_seed(2)
    mech = Structured(16, 4, offset=-2).cuda()
    q, k, v = (torch.randn(2, 4, 256, 64, device="cuda", requires_grad=True) for _ in range(3))
    keep = torch.ones(2, 256, dtype=torch.bool, device="cuda")
    keep[1, 200:] = False
    for mask in (Mask(causal=causal), Mask(key_keep=keep, causal=causal)):
        ref = mech.weights(q, k, mask) @ v
        out, _ = mech(q, k, v, mask)
        torch.testing.assert_close(out, ref, atol=2e-3, rtol=2e-3)  # FlexAttention on GPU: TF32 matmuls
        g = torch.randn_like(ref)
        for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
            torch.testing.assert_close(a, b, atol=5e-3, rtol=5e-3)


def test_support_mask_mod_builds_flex_attentions_block_mask():
    # the one support draws FlexAttention's BlockMask: a block is kept iff it holds an entry of S
    from torch.nn.attention.flex_attention import create_block_mask

    n, blk = 300, 64
    S = Support(w=20, offset=-5, columns=torch.tensor([3, -1, 250]))
    bm = create_block_mask(S.mask_mod(), None, None, n, n, device="cpu", BLOCK_SIZE=blk)
    nb = -(-n // blk)
    dense = torch.zeros(nb * blk, nb * blk, dtype=torch.bool)
    dense[:n, :n] = S.dense(n, n)
    want = dense.view(nb, blk, nb, blk).any(3).any(1)
    assert torch.equal(bm.to_dense()[0, 0].bool(), want)
