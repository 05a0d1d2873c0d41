"""Least-loaded assignment with memory: the heap with set-aside and dropped bins equals the plain rule."""
import numpy as np

from mindspeed_mm.core.fcp.solver.balance import least_loaded_assignment


def _plain(order, weights, sizes, rooms, scales, loads, overflow=False):
    """Every item to the least-loaded bin with room, lowest index on ties, by a scan over all bins."""
    room, load, out = list(rooms), list(loads), []
    for i in order:
        fits = [b for b in range(len(room)) if room[b] >= sizes[i]]
        if not fits and overflow:
            fits = list(range(len(room)))
        if not fits:
            return None
        b = min(fits, key=lambda b: (load[b], b))
        out.append(b)
        load[b] += weights[i] * scales[b]
        room[b] -= sizes[i]
    return out


def test_matches_the_plain_rule_on_random_instances():
    rng = np.random.default_rng(21)
    scanned = 0
    for case in range(400):
        n = int(rng.integers(1, 120))
        bins = int(rng.integers(1, 40))
        weights = rng.uniform(0.1, 10, size=n).round(int(rng.integers(0, 3))).tolist()  # ties when rounded
        sizes = rng.integers(1, 100, size=n).tolist()
        # Tight memory on some cases, so that many bins are full or nearly full.
        slack = rng.uniform(0.9, 3.0)
        rooms = rng.integers(50, 100 + int(slack * sum(sizes) / bins), size=bins).tolist()
        scales = (1.0 / rng.integers(1, 5, size=bins)).tolist()
        # Equal starting loads (the first wave without a heap), one so large that small weights do
        # not raise it, or distinct ones; some zero weights, which raise nothing.
        kind = case % 4
        loads = ([0.0] * bins if kind == 0 else [1e20] * bins if kind == 1 else [2.5] * bins if kind == 2
                 else rng.uniform(0, 5, size=bins).round(1).tolist())
        if case % 5 == 0:
            weights = [w if rng.random() < 0.8 else 0.0 for w in weights]
        order = sorted(range(n), key=lambda i: (-weights[i], i))
        expected = _plain(order, weights, sizes, rooms, scales, loads)
        got = least_loaded_assignment(order, weights, sizes, rooms, scales, loads)
        assert got == expected, case
        assert least_loaded_assignment(order, weights, sizes, rooms, scales, loads, overflow=True) == \
            _plain(order, weights, sizes, rooms, scales, loads, overflow=True), case
        scanned += expected is not None and sum(sizes) > 0.8 * sum(rooms)
    assert scanned > 20   # memory-tight cases did occur


def test_defaults_and_an_item_that_fits_nowhere():
    assert least_loaded_assignment([0, 1, 2], [3.0, 2.0, 2.0], [1, 1, 1], [5, 5]) == [0, 1, 1]
    assert least_loaded_assignment([0, 1], [1.0, 1.0], [4, 7], [6, 6]) is None
    assert least_loaded_assignment([], [], [], [3]) == []
