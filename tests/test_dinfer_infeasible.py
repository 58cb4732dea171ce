"""Data-dependent sizes no data can reach are errors, not "ok if data" (issue 24)."""
import pytest
import torch

from validation import dinfer
from validation.input_space import Status


def at_least_two(x):
    idx = torch.nonzero(x > 0).squeeze(-1)
    torch._check(idx.shape[0] >= 2)  # u0 >= 2, and nonzero gives u0 <= N
    return idx * 2


def test_a_check_no_data_can_pass_at_n_1_is_an_error_class():
    space = dinfer(at_least_two, "x: f32[N]", dims={"N": (1, 8)})
    assert space.complete
    one = space.classify(N=1)
    assert one.status is Status.ERROR and one.ok is False
    more = space.classify(N=4)
    assert more.status is Status.DATA_DEPENDENT and [str(d) for d in more.data_conditions] == ["u0 >= 2"]
    with pytest.raises(RuntimeError):
        at_least_two(torch.ones(1))  # eager: whatever the data, N = 1 fails
    at_least_two(torch.ones(4))
