"""Deliberately wrong engine parts, reinstated by the tests that show validation and fuzzing catch them."""
import shapes.value_ranges as value_ranges
from shapes.facts import FactStore
from shapes.value_ranges import ValueRange


def wrong_mod_range(monkeypatch) -> None:
    """``x % 8`` bounded by ``[0, 6]`` (off by one) in range analysis."""
    good = value_ranges.mod

    def bad_mod(a, b):
        r = good(a, b)
        if b.is_singleton and b.lower == 8:
            return ValueRange(r.lower, min(r.upper, 6))
        return r
    monkeypatch.setattr(value_ranges, "mod", bad_mod)


def old_size_oblivious_ranges(monkeypatch) -> None:
    """The engine's size-oblivious ranges before the fix: every unbacked symbol with lower >= 0
    widened to ``[max(2, lo), max(2, hi)]``, booleans in ``[0, 1]`` included."""
    def ranges_for(self, size_oblivious):
        if not size_oblivious:
            return self.ranges
        r = dict(self.ranges)
        for s in self.table.unbacked:
            if s in r and r[s].lower >= 0:
                r[s] = ValueRange(max(2, r[s].lower), max(2, r[s].upper))
        return r
    monkeypatch.setattr(FactStore, "ranges_for", ranges_for)
