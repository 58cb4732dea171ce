"""dinfer's trace time limit: a timeout is always reported as a timeout.

An alarm can land where torch's C++ swallows it and raises an error of its
own, or in the middle of an import; neither may turn into the program's error.
"""
import sys
import textwrap
import threading
import time

import pytest
import torch

from validation.dinfer import dinfer
from validation.dinfer.limits import TraceTimeout, time_limit


def spin(seconds=20.0):
    """Tensor arithmetic until the alarm stops it (bounded, so a broken limit fails the test
    instead of hanging it)."""
    x = torch.ones(3)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        x = x + 1


@pytest.mark.parametrize("where", ["main", "thread"])
def test_a_swallowed_timeout_still_ends_the_block_as_a_timeout(where):
    outcome = {}

    def block():
        try:
            with time_limit(0.05):
                try:
                    spin()
                except BaseException:  # what torch's argument parser does to a callback's error
                    pass
        except TraceTimeout as e:
            outcome["timeout"] = e
    if where == "main":
        block()
    else:
        t = threading.Thread(target=block)
        t.start()
        t.join(30)
    assert isinstance(outcome.get("timeout"), TraceTimeout)


def test_an_error_made_of_a_swallowed_timeout_is_the_timeout():
    with pytest.raises(TraceTimeout) as info:
        with time_limit(0.05):
            try:
                spin()
            except BaseException:
                raise TypeError("unsupported operand type(s) for +: 'Tensor' and 'int'")
    assert isinstance(info.value.__cause__, TypeError)


def test_the_programs_own_error_before_the_time_is_up_stays_its_own():
    with pytest.raises(ValueError):
        with time_limit(5):
            raise ValueError("the program's error")


def test_an_alarm_never_interrupts_an_import(tmp_path, monkeypatch):
    (tmp_path / "slow_to_import_mod.py").write_text(textwrap.dedent("""
        import time
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.3:
            sum(range(100))
        COMPLETE = True
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TraceTimeout):
        with time_limit(0.05):
            import slow_to_import_mod  # noqa: F401 - the alarm is due in the middle of this
            spin()
    assert sys.modules["slow_to_import_mod"].COMPLETE


def loop_forever(x):
    while True:
        x = x + 1


def test_dinfer_of_a_loop_reports_a_timeout_at_every_short_limit():
    # Short limits land the alarm in torch's first-trace lazy imports and in its
    # C++ operator calls; each must end as "timed out", never as a class of errors.
    for limit in (0.01, 0.03, 0.1):
        space = dinfer(loop_forever, "x: f32[N]", dims={"N": (1, 8)}, trace_timeout=limit)
        assert space.timed_out and not space.classes, space.table()


def test_an_alarm_inside_a_finalizer_is_neither_lost_nor_reported_as_unraisable():
    import gc
    import warnings

    class SlowToDie:
        def __del__(self):
            end = time.monotonic() + 0.5
            while time.monotonic() < end:
                pass

    caught = []
    old = sys.unraisablehook
    sys.unraisablehook = caught.append
    try:
        with warnings.catch_warnings(record=True) as w, pytest.raises(TraceTimeout):
            with time_limit(0.1):
                SlowToDie()  # dropped at once: the alarm lands in its __del__
                gc.collect()
                while True:
                    sum(range(10))
    finally:
        sys.unraisablehook = old
    assert not caught and not [x for x in w if "Unraisable" in type(x.message).__name__]
