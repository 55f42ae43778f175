"""Fused hash dropout: the Triton kernel draws exactly the torch path's mask, forward and backward."""

from gnndist.kernels.testing import use_interpreter

DEVICE = use_interpreter()  # before any Triton kernel is imported

import pytest
import torch
from gnndist.kernels.dropout.reference import apply_dropout, cell_bits, node_keys


@pytest.mark.triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("width", [1, 37, 200])
def test_fused_dropout_equals_torch_path(dtype, width):
    from gnndist.kernels.dropout.triton import HashDropout

    ids = torch.cat([torch.arange(50), torch.tensor([2**31 - 1, 2**31, 2**40 + 7, 3 * 2**33])])  # high ids too
    keys = node_keys(ids, seed=3, epoch=5, key=2).to(DEVICE)
    assert (keys < 0).any() and (keys >= 0).any()  # both halves of the uint32 range
    x = torch.randn(ids.numel(), width).to(DEVICE, dtype).requires_grad_()
    p = 0.3
    cols = torch.arange(width, device=DEVICE, dtype=torch.int32)
    expected = apply_dropout(x, cell_bits(keys[:, None], cols[None, :]) < int(p * 2**31), p)
    got = HashDropout.apply(x, keys, p)
    r = torch.randn_like(expected)
    got_g, expected_g = torch.autograd.grad(got, x, r)[0], torch.autograd.grad(expected, x, r)[0]
    if DEVICE == "cuda" or dtype == torch.float32:
        assert torch.equal(got, expected) and torch.equal(got_g, expected_g)
    else:  # the interpreter truncates to bf16 where CUDA rounds to nearest: same mask, values within 1 ulp
        for a, b in ((got, expected), (got_g, expected_g)):
            assert torch.equal(a == 0, b == 0)
            torch.testing.assert_close(a, b, rtol=2**-7, atol=0)
    kept = (got != 0).float().mean().item()
    assert abs(kept - (1 - p)) < 0.1 or width == 1


@pytest.mark.triton
def test_fused_dropout_changes_with_the_key():
    from gnndist.kernels.dropout.triton import dropout_launch

    x = torch.ones(64, 16, device=DEVICE)
    a = dropout_launch(x, node_keys(torch.arange(64), 0, 0, 1).to(DEVICE), 0.5)
    b = dropout_launch(x, node_keys(torch.arange(64), 0, 1, 1).to(DEVICE), 0.5)
    assert not torch.equal(a, b)
