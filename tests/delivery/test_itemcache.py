"""The item cache (delivery/itemcache.py) keeps at most its count and its bytes, and hands each
kept entry out once, as a model of it says, whatever the adds and takes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ackqueue.delivery.itemcache import ItemCache

steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 5), st.binary(max_size=12), st.integers(0, 3)),
        st.tuples(st.just("take"), st.integers(0, 5)),
        st.tuples(st.just("discard"), st.integers(0, 5)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(steps, st.integers(1, 4), st.integers(0, 24))
def test_the_cache_keeps_what_fits_and_hands_each_entry_out_once(script, max_items, max_bytes):
    cache = ItemCache(max_items=max_items, max_bytes=max_bytes)
    model: dict[int, tuple[bytes, int]] = {}
    for step in script:
        if step[0] == "add":
            _, key, data, attempts = step
            used = sum(len(d) for d, _ in model.values())
            fits = len(model) < max_items and used + len(data) <= max_bytes
            assert cache.add(key, data, attempts) is fits
            if fits:
                model[key] = (data, attempts)
        elif step[0] == "take":
            assert cache.take(step[1]) == model.pop(step[1], None)
        else:
            cache.discard(step[1])
            model.pop(step[1], None)
        assert len(cache) == len(model)
        assert all((key in cache) is (key in model) for key in range(6))
