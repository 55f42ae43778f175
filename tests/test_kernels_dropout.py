"""Hash dropout: the torch path's row-at-once mask equals the per-cell draws; the draws look independent and
uniform; the Triton kernel draws exactly the torch path's mask, forward and backward."""

from gnndist.kernels.testing import use_interpreter

DEVICE = use_interpreter()  # before any Triton kernel is imported

import pytest
import torch
from gnndist.kernels.dropout.reference import apply_dropout, cell_draws, drop_mask, mask_threshold, node_keys

HIGH_IDS = torch.tensor([2**31 - 1, 2**31, 2**40 + 7, 3 * 2**33])


@pytest.mark.parametrize("width", [1, 2, 37, 200])
def test_the_row_mask_equals_the_per_cell_draws(width):
    keys = node_keys(torch.cat([torch.arange(300), HIGH_IDS]), seed=1, epoch=4, key=3)
    cols = torch.arange(width, dtype=torch.int32)
    for p in (0.0, 0.1, 0.5, 0.9):
        per_cell = cell_draws(keys[:, None], cols[None, :], width) < mask_threshold(p)
        assert torch.equal(drop_mask(keys, width, p), per_cell)


def test_the_draws_are_uniform_and_uncorrelated():
    """Over 4M cells: the 16-bit draws' mean and every bit's mean, and the correlation of the drop indicators
    between the two halves of one hash, neighbouring column pairs and neighbouring rows (consecutive and strided
    ids), all within 4 standard errors of independence."""
    n, width = 20000, 200
    cols = torch.arange(width, dtype=torch.int32)
    for ids in (torch.arange(n), torch.arange(n) * 1024 + 5):
        draws = cell_draws(node_keys(ids, seed=0, epoch=0, key=1)[:, None], cols[None, :], width)  # [n, F]
        bits = ((draws[..., None] >> torch.arange(16, dtype=torch.int32)) & 1).float().mean((0, 1))
        assert (bits - 0.5).abs().max() < 4 * 0.5 / (n * width) ** 0.5
        drop = (draws < mask_threshold(0.3)).float()
        assert abs(drop.mean().item() - 0.3) < 4 * (0.21 / (n * width)) ** 0.5

        def corr(a, b):
            a, b = a - a.mean(), b - b.mean()
            return ((a * b).mean() / (a.std() * b.std())).item()

        for a, b in ((drop[:, 0::2], drop[:, 1::2]), (drop[:, :-2], drop[:, 2:]), (drop[:-1], drop[1:])):
            assert abs(corr(a, b)) < 4 / a.numel() ** 0.5


def test_p_is_rounded_to_sixteen_bits():
    assert mask_threshold(0.5) == 2**15 and mask_threshold(0.0) == 0 and mask_threshold(0.1) == 6554
    with pytest.raises(ValueError, match="outside"):
        mask_threshold(1.0)


@pytest.mark.triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("width", [1, 37, 200])
def test_fused_dropout_equals_torch_path(dtype, width):
    from gnndist.kernels.dropout.triton import HashDropout

    ids = torch.cat([torch.arange(50), HIGH_IDS])  # high ids too
    keys = node_keys(ids, seed=3, epoch=5, key=2).to(DEVICE)
    assert (keys < 0).any() and (keys >= 0).any()  # both halves of the uint32 range
    x = torch.randn(ids.numel(), width).to(DEVICE, dtype).requires_grad_()
    p = 0.3
    expected = apply_dropout(x, drop_mask(keys, width, p), p)
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
