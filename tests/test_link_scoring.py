"""Pairs scored a block at a time (gnndist.tasks.scoring) equal the pairs scored whole, gradients included."""

import pytest
import torch
import torch.nn.functional as F

from gnndist.nn.models.link import decoder
from gnndist.tasks import scoring
from gnndist.tasks.pairs import Fetched


def whole(dec, rows, index, positives, k, total):
    """The loss as one expression over every pair (what the link task computed before blocks)."""
    s = scoring.wide(dec, rows[index[:, 0]], rows[index[:, 1]])
    return (F.softplus(-s[:positives]).sum() + F.softplus(s[positives:]).sum() / k) / total


def grads(loss, rows, dec):
    loss.backward()
    return [rows.grad.clone()] + [p.grad.clone() for p in dec.parameters()]


@pytest.mark.parametrize("name", ["dot", "mlp"])
@pytest.mark.parametrize("block", [7, 1000])  # 7 pairs a block: 5 blocks of positives, 13 of negatives; 1000: one
def test_blocks_equal_the_whole_loss_and_gradients(monkeypatch, name, block):
    torch.manual_seed(0)
    width, n_rows, positives, k = 8, 40, 30, 3
    index = torch.randint(0, n_rows, (positives * (1 + k), 2))
    total = torch.tensor(float(positives))
    base = torch.randn(n_rows, width)
    dec = decoder(name, width)

    rows = base.clone().requires_grad_()
    ref_loss = whole(dec, rows, index, positives, k, total)
    ref = grads(ref_loss * 4.0, rows, dec)  # a loss scale of 4: the gradients scale exactly
    dec.zero_grad()

    monkeypatch.setattr(scoring, "PAIR_BLOCK_CELLS", block * width)
    assert scoring.block_pairs(width) == block
    rows = base.clone().requires_grad_()
    locate = lambda t: t  # noqa: E731  (node ids are the rows' positions here)
    loss = scoring.pair_loss(dec, Fetched.local(rows), locate, index[:positives].int(), index[positives:], k, total)
    got = grads(loss * 4.0, rows, dec)

    assert abs(float(loss.detach()) - float(ref_loss.detach())) <= 1e-6 * abs(float(ref_loss))
    for a, b in zip(got, ref):
        assert a.dtype == b.dtype
        assert float((a - b).abs().max()) <= 1e-6 * float(b.abs().max())
    assert len(got) == 1 + len(list(dec.parameters()))


@pytest.mark.parametrize("name", ["dot", "mlp"])
def test_decode_in_blocks_equals_one_call(monkeypatch, name):
    torch.manual_seed(1)
    rows, index = torch.randn(25, 6), torch.randint(0, 25, (101, 2))
    dec = decoder(name, 6)
    ref = scoring.wide(dec, rows[index[:, 0]], rows[index[:, 1]])
    monkeypatch.setattr(scoring, "PAIR_BLOCK_CELLS", 5 * 6)
    ids = index + 1000  # node ids, located among the rows
    got = scoring.decode(dec, Fetched.local(rows), lambda t: t - 1000, ids)
    assert got.dtype == torch.float32 and got.shape == (101,)
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-6)
    assert scoring.decode(dec, Fetched.local(rows), lambda t: t - 1000, ids[:0]).shape == (0,)


def test_a_rank_without_pairs_has_zero_loss_and_gradients():
    dec = decoder("mlp", 4)
    rows = torch.randn(3, 4, requires_grad=True)
    none = torch.zeros(0, 2, dtype=torch.int64)
    loss = scoring.pair_loss(dec, Fetched.local(rows), lambda t: t, none, none, 1, torch.tensor(5.0))
    loss.backward()
    assert float(loss) == 0.0 and float(rows.grad.abs().max()) == 0.0
    assert all(p.grad is not None and float(p.grad.abs().max()) == 0.0 for p in dec.parameters())


@pytest.mark.parametrize("bound", [60, 10**9])  # a map over the id range; a sort (the range is too wide for a map)
def test_distinct_ids_and_their_positions(bound):
    from gnndist.tasks.pairs import _distinct, _locator

    torch.manual_seed(2)
    a, b = torch.randint(0, 60, (40, 2)), torch.randint(0, 60, (17,))
    uniq = _distinct([a, b], bound)
    assert uniq.dtype == torch.int64 and torch.equal(uniq, torch.unique(torch.cat([a.view(-1), b])))
    locate = _locator(uniq, torch.arange(uniq.shape[0]), bound)
    pa, pb = locate(a), locate(b)
    assert pa.shape == a.shape and pb.shape == b.shape
    assert torch.equal(uniq[pa.long()], a) and torch.equal(uniq[pb.long()], b)
    assert (pa.dtype == torch.int32) == (bound == 60)


def test_half_rows_keep_their_small_gradients_under_a_loss_scale():
    """fp16 rows: each pair's gradient (about 1 / total) is below fp16's range unscaled; the blocks compute it in
    float32 and the loss scale lifts it into range, as when the backward ran at scale."""
    torch.manual_seed(3)
    base, index = torch.randn(20, 4), torch.randint(0, 20, (60, 2))
    dec, total, scale = decoder("mlp", 4), torch.tensor(1e7), 2.0**16
    wide = base.clone().requires_grad_()
    (scoring.pair_loss(dec, Fetched.local(wide), lambda t: t, index[:30], index[30:], 1, total) * scale).backward()
    half = base.half().requires_grad_()
    (scoring.pair_loss(dec, Fetched.local(half), lambda t: t, index[:30], index[30:], 1, total) * scale).backward()
    assert half.grad.dtype == torch.float16 and bool((half.grad != 0).any())
    torch.testing.assert_close(half.grad.float(), wide.grad, rtol=1e-2, atol=1e-3 * float(wide.grad.abs().max()))


@pytest.mark.parametrize("name", ["dot", "mlp"])
def test_far_and_near_rows_read_in_place_equal_one_table(monkeypatch, name):
    """Rows from two sources (those fetched from other ranks, then this rank's own, read where they are): the loss
    and both parts' gradients equal those of the one concatenated table; a second backward is refused."""
    torch.manual_seed(4)
    width, n_far, n_rows, positives = 6, 15, 40, 25
    index = torch.randint(0, n_rows, (positives * 3, 2))
    total, base, dec = torch.tensor(float(positives)), torch.randn(n_rows, width), decoder(name, width)
    table = base.clone().requires_grad_()
    ref = grads(whole(dec, table, index, positives, 2, total), table, dec)
    dec.zero_grad()
    monkeypatch.setattr(scoring, "PAIR_BLOCK_CELLS", 9 * width)  # blocks that mix far and near rows
    far, near = base[:n_far].clone().requires_grad_(), base[n_far:].clone().requires_grad_()
    loss = scoring.pair_loss(dec, Fetched(far, near), lambda t: t, index[:positives], index[positives:], 2, total)
    loss.backward(retain_graph=True)
    got = [torch.cat([far.grad, near.grad])] + [p.grad for p in dec.parameters()]
    for a, b in zip(got, ref):
        assert float((a - b).abs().max()) <= 1e-6 * float(b.abs().max())
    torch.testing.assert_close(Fetched(far, near).take(index[:, 1]), base[index[:, 1]], rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="twice"):
        loss.backward()
