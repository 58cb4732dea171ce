"""Index ranges of positions that programs compute from data (shapes/index_bounds.py).

Each program looks up an embedding with indices built the way real models
build positions (OPT: ``cumsum`` of ``torch.ones``; RoBERTa: ``cumsum`` of
``input_ids.ne(pad)``; a declared 0/1 attention mask).  The traced program
must reject exactly the sizes where eager raises for some data, and accept
the others: checked against eager on both sides of the bound.
"""
import pytest
import torch
import torch.nn as nn

import shapes

ROWS = 12


class OnesPositions(nn.Module):
    """OPT's positions: cumsum of a float mask of ones, times the mask, minus 1, plus an offset."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(ROWS, 4)

    def forward(self, ids):
        mask = torch.ones(ids.shape[0], ids.shape[1])
        p = (torch.cumsum(mask, dim=1) * mask - 1).long()
        return self.pos(p[:, 0:] + 2)


class PadPositions(nn.Module):
    """RoBERTa's positions: cumsum of ``ids != pad``, times the same mask, plus the pad index."""

    def __init__(self, pad=1):
        super().__init__()
        self.pad = pad
        self.pos = nn.Embedding(ROWS, 4)

    def forward(self, ids):
        mask = ids.ne(self.pad).int()
        p = torch.cumsum(mask, dim=1).type_as(mask) * mask
        return self.pos(p.long() + self.pad)


class MaskPositions(nn.Module):
    """Positions from an attention mask given as an input (values declared in the spec)."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(ROWS, 4)

    def forward(self, ids, mask):
        p = torch.cumsum(mask, dim=1) * mask - 1
        return self.pos(p + 2)


def _eager_ok(model, *inputs):
    try:
        model(*inputs)
        return True
    except (IndexError, RuntimeError):
        return False


def _accepts(tp, *inputs):
    try:
        tp.run(*inputs)
        return True
    except shapes.GuardViolation:
        return False


@pytest.mark.parametrize("model, last_ok", [(OnesPositions(), ROWS - 2), (PadPositions(), ROWS - 2)],
                         ids=["ones_cumsum", "ne_pad_cumsum"])
def test_positions_from_data_bound_the_sequence_exactly(model, last_ok):
    tp = shapes.trace(model, "ids: i64[B, T]", dims={"T": 4})
    assert [str(g.expr) for g in tp.env.runtime_asserts] == [f"T <= {last_ok}"]
    for T in (last_ok - 1, last_ok, last_ok + 1, last_ok + 2):
        ids = torch.full((2, T), 5)  # no padding: the largest positions
        assert _eager_ok(model, ids) == (T <= last_ok), T
        assert _accepts(tp, ids) == (T <= last_ok), T


def test_the_data_bound_message_says_the_indices_come_from_data():
    tp = shapes.trace(PadPositions(), "ids: i64[B, T]", dims={"T": 4})
    (ra,) = tp.env.runtime_asserts
    assert "for some data" in ra.message and "embedding" in ra.message


def test_a_declared_mask_range_bounds_positions_and_is_checked_at_run():
    model = MaskPositions()
    tp = shapes.trace(model, "ids: i64[B, T]", "mask: i64[B, T] in 0..1", dims={"T": 4})
    assert [str(g.expr) for g in tp.env.runtime_asserts] == [f"T <= {ROWS - 2}"]
    for T in (ROWS - 2, ROWS - 1):
        ids, mask = torch.zeros(2, T, dtype=torch.int64), torch.ones(2, T, dtype=torch.int64)
        assert _eager_ok(model, ids, mask) == _accepts(tp, ids, mask) == (T <= ROWS - 2)
    with pytest.raises(shapes.GuardViolation, match=r"holds 2, outside the values 0\.\.1"):
        tp.run(torch.zeros(2, 3, dtype=torch.int64), torch.full((2, 3), 2))


def test_an_undeclared_mask_gives_no_bound():
    # Its values are the caller's: eager runs at any T for a mask of zeros, so no size is rejected.
    tp = shapes.trace(MaskPositions(), "ids: i64[B, T]", "mask: i64[B, T]", dims={"T": 4})
    assert tp.env.runtime_asserts == []
    T = ROWS + 5
    assert _accepts(tp, torch.zeros(2, T, dtype=torch.int64), torch.zeros(2, T, dtype=torch.int64))


class ExclusiveMasks(nn.Module):
    """``ne(ids, 1) * eq(ids, 1)`` is 0 everywhere: two sources whose ends are never reached together."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(ROWS, 4)

    def forward(self, ids):
        both = ids.ne(1).long() * ids.eq(1).long()
        return self.pos(torch.cumsum(both, dim=1))


class ConstrainedData(nn.Module):
    """``ids * 0`` is not free data: ``!= 1`` holds everywhere, so it is no 0/1 source."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(ROWS, 4)

    def forward(self, ids):
        return self.pos(torch.cumsum((ids * 0).ne(0).long(), dim=1))


@pytest.mark.parametrize("model", [ExclusiveMasks(), ConstrainedData()], ids=["exclusive", "constrained"])
def test_ranges_that_data_cannot_reach_give_no_bound(model):
    tp = shapes.trace(model, "ids: i64[B, T]", dims={"T": 4})
    assert tp.env.runtime_asserts == []
    ids = torch.randint(0, 5, (2, ROWS + 3))
    assert _eager_ok(model, ids) and _accepts(tp, ids)


class HalfPositions(nn.Module):
    """Positions counted in float16: above 2**11 the count rounds, so only small tables get a bound."""

    def __init__(self, rows):
        super().__init__()
        self.pos = nn.Embedding(rows, 2)

    def forward(self, ids):
        mask = torch.ones(ids.shape[0], ids.shape[1], dtype=torch.float16)
        return self.pos(torch.cumsum(mask, dim=1).long())


def test_float_positions_bound_only_tables_rounding_cannot_reach():
    small = shapes.trace(HalfPositions(ROWS), "ids: i64[B, T]", dims={"T": 4})
    assert [str(g.expr) for g in small.env.runtime_asserts] == [f"T < {ROWS}"]
    big = shapes.trace(HalfPositions(4096), "ids: i64[B, T]", dims={"T": 4})
    assert big.env.runtime_asserts == []


class NeverEqual(nn.Module):
    """``flags == 2`` on a bool input is False everywhere: no data reaches 1, so no bound."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(ROWS, 4)

    def forward(self, flags):
        return self.pos(torch.cumsum(flags.eq(2).long(), dim=1))


def test_a_comparison_the_dtype_cannot_satisfy_is_no_data_source():
    tp = shapes.trace(NeverEqual(), "flags: bool[B, T]", dims={"T": 4})
    assert tp.env.runtime_asserts == []
    flags = torch.ones(2, ROWS + 3, dtype=torch.bool)
    assert _eager_ok(NeverEqual(), flags) and _accepts(tp, flags)


class WrittenInput(nn.Module):
    """``ids[:, 0] = 1`` writes padding into the input: ``ids != 1`` is no longer free data."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(ROWS, 4)

    def forward(self, ids):
        ids = ids.clone()
        ids[:, 0] = 1
        return self.pos(torch.cumsum(ids.ne(1).long(), dim=1))


def test_an_input_written_in_place_is_no_data_source():
    # Row sums reach T - 1 only: a bound T <= ROWS - 1 would reject T == ROWS, where eager runs.
    model = WrittenInput()
    tp = shapes.trace(model, "ids: i64[B, T]", dims={"T": 4})
    ids = torch.full((2, ROWS), 5)
    assert _eager_ok(model, ids) and _accepts(tp, ids)
