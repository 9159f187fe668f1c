"""Response-cache keys come from content, never from ``repr``.

The oracle is :func:`same_value`, a plain type-strict structural equality: two requests must
get one key exactly when it says their values are equal.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import math
import os
import struct
import subprocess
import sys
import uuid
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search import DefaultQueryPlanner, SearchPipeline, SearchRequest
from kolm_search.contract.cachekey import canonical_digest
from kolm_search.contract.pipeline import cache_key
from kolm_search.errors import KolmTypeError
from tests.fakes import ListLogger, ListRetriever, MemoryCache

ROOT = Path(__file__).resolve().parents[2]


# -- the oracle ---------------------------------------------------------------------------
def same_value(a: Any, b: Any) -> bool:
    """Type-strict equality: floats by bits (all NaNs alike), arrays by dtype, shape and bytes."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return len(a) == len(b) and all(any(same_value(ka, kb) and same_value(va, b[kb]) for kb in b)
                                        for ka, va in a.items())
    if isinstance(a, (set, frozenset)):
        return len(a) == len(b) and all(any(same_value(x, y) for y in b) for x in a)
    if isinstance(a, (np.ndarray, np.generic)):
        return a.dtype == b.dtype and np.shape(a) == np.shape(b) and np.asarray(a).tobytes() == np.asarray(b).tobytes()
    return bool(a == b)


def rebuilt(v: Any) -> Any:
    """An equal value made of fresh objects, dicts in reverse insertion order."""
    if isinstance(v, list):
        return [rebuilt(x) for x in v]
    if isinstance(v, tuple):
        return tuple(rebuilt(x) for x in v)
    if isinstance(v, dict):
        return {rebuilt(k): rebuilt(x) for k, x in reversed(list(v.items()))}
    if isinstance(v, frozenset):
        return frozenset(rebuilt(x) for x in sorted(v, key=repr, reverse=True))
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, str):
        return "".join(list(v))
    if isinstance(v, bytes):
        return bytes(bytearray(v))
    return v


def perturbed(v: Any, data: st.DataObject) -> Any:
    """``v`` with one leaf swapped for a look-alike of another type (or a nearby value)."""
    if isinstance(v, list) and v:
        i = data.draw(st.integers(0, len(v) - 1))
        return [*v[:i], perturbed(v[i], data), *v[i + 1:]]
    if isinstance(v, dict) and v:
        k = data.draw(st.sampled_from(sorted(v, key=repr)))
        return {**v, k: perturbed(v[k], data)}
    if isinstance(v, tuple):
        return list(v)
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return data.draw(st.sampled_from([str(v), float(v), v + 1, np.int64(v) if abs(v) < 2**62 else -v]))
    if isinstance(v, float):
        return data.draw(st.sampled_from([str(v), -v, np.float64(v)]))
    if isinstance(v, str):
        return data.draw(st.sampled_from([v.encode("utf-8", "surrogatepass"), v + "\x00", [v]]))
    if isinstance(v, np.ndarray):
        return v.astype(np.float32) if v.dtype != np.float32 else v.astype(np.float64)
    return [v]


keys = st.one_of(st.integers(-5, 5), st.text(max_size=3), st.booleans(), st.binary(max_size=3),
                 st.tuples(st.integers(0, 3), st.text(max_size=2)))
leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(st.characters(codec=None, exclude_categories=()), max_size=6), st.binary(max_size=6),
    st.integers(-3, 3).map(np.int64), st.floats(width=32).map(np.float32),
    st.lists(st.integers(-3, 3), max_size=4).map(lambda xs: np.asarray(xs, dtype=np.int32)),
)
values = st.recursive(leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, max_size=3).map(tuple),
    st.dictionaries(keys, inner, max_size=4), st.frozensets(keys, max_size=3)), max_leaves=12)

PLAN = DefaultQueryPlanner().plan(SearchRequest(query="q", limit=3))


def key_of(context: Any) -> str:
    return cache_key(PLAN, SearchRequest(query="q", limit=3, filters={"f": 1}, context={"v": context}))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values, values, st.data())
def test_same_key_iff_same_value(a: Any, b: Any, data: st.DataObject) -> None:
    assert key_of(a) == key_of(rebuilt(a))
    for other in (b, perturbed(a, data)):
        assert (key_of(a) == key_of(other)) == same_value(a, other), (a, other)


@pytest.mark.parametrize("looks_alike", [
    [1, "1", 1.0, True, b"1", np.int64(1), np.float64(1.0), np.array(1), np.array([1]), (1,), [1], {1}, frozenset({1}),
     bytearray(b"1"), decimal.Decimal("1"), 1 + 0j],
    ["b'x'", b"x", "x", np.str_("x"), np.bytes_(b"x")],
    [None, "None", 0, False, "", b"", (), [], {}, np.zeros(0), np.zeros((0, 1)), np.zeros(0, np.float32)],
    [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, "nan", np.float32("nan")],
    [dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.date(2024, 1, 1),
     "2024-01-01", dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))],
])
def test_look_alikes_get_distinct_keys(looks_alike: list[Any]) -> None:
    ks = [key_of(v) for v in looks_alike]
    assert len(set(ks)) == len(ks)


def test_arrays_differing_where_repr_elides_get_distinct_keys() -> None:
    a = np.arange(10000)
    b = a.copy()
    b[5000] = -1
    assert repr(a) == repr(b)  # the case repr() cannot tell apart
    assert key_of(a) != key_of(b)
    assert key_of(a) == key_of(np.arange(10000))
    assert key_of(a) != key_of(a.astype(np.int32)) != key_of(a.reshape(100, 100))
    big_endian = a.astype(">i8")
    assert key_of(big_endian) == key_of(a)  # same values, same native dtype


def test_supported_extras_key_by_content() -> None:
    class Colour(enum.Enum):
        RED = 1
        BLUE = 2

    u = uuid.UUID(int=7)
    assert key_of(Colour.RED) != key_of(Colour.BLUE) != key_of(1)
    assert key_of(u) == key_of(uuid.UUID(int=7)) != key_of(uuid.UUID(int=8))
    assert key_of(decimal.Decimal("1.5")) == key_of(decimal.Decimal("1.5")) != key_of(1.5)
    assert key_of(OrderedDict([("a", 1), ("b", 2)])) == key_of({"b": 2, "a": 1})
    assert key_of(Path("a/b")) == key_of(Path("a") / "b") != key_of("a/b")


class Opaque:
    def __init__(self, tag: str) -> None:
        self.tag = tag


class MyStr(str):
    pass


@pytest.mark.parametrize("value", [Opaque("x"), [1, Opaque("x")], {"k": {1: (Opaque("y"),)}}, MyStr("x"),
                                   np.array([Opaque("x")], dtype=object), lambda: 1, {frozenset({Opaque("z")})}])
def test_unfaithful_values_are_refused_by_name(value: Any) -> None:
    with pytest.raises(KolmTypeError, match=r"context\[\'v\'\].*no faithful content encoding"):
        key_of(value)


def test_cycles_and_deep_nesting_are_not_cacheable() -> None:
    cyc: list[Any] = []
    cyc.append(cyc)
    deep: Any = 1
    for _ in range(500):
        deep = [deep]
    for value in (cyc, deep):
        with pytest.raises(KolmTypeError, match="contains itself|nested deeper"):
            canonical_digest(value)


def pipeline(cache: MemoryCache, logger: Any = None) -> tuple[SearchPipeline, ListRetriever]:
    ret = ListRetriever()
    return SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ret, "cache": cache},
                          {"logger": logger}), ret


def test_requests_with_unfaithful_values_are_never_cached() -> None:
    cache, logger = MemoryCache(), ListLogger()
    pipe, ret = pipeline(cache, logger)
    for _ in range(3):  # a fresh object each time, possibly at a freed one's address
        resp = pipe.search_sync({"query": "q", "limit": 3, "context": {"user": Opaque("alice")}})
        assert [d.id for d in resp.results] == ["d0", "d1", "d2"] and not resp.metadata.cache_hit
    assert cache.calls == [] and len(ret.calls) == 3
    assert len(logger.warnings()) == 1 and "not cached" in logger.warnings()[0][1]
    pipe.search_sync({"query": "q", "limit": 3, "context": {"user": "alice"}})  # a keyable request still is
    assert [c[0] for c in cache.calls] == ["get", "set"]


def test_unfaithful_without_logger_warns_once_and_survives_warnings_as_errors() -> None:
    pipe, _ = pipeline(MemoryCache())
    with pytest.warns(RuntimeWarning, match="not cached"):
        pipe.search_sync({"query": "q", "context": {"o": Opaque("a")}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(pipe.search_sync({"query": "q", "context": {"o": Opaque("b")}}).results) == 10


@pytest.mark.parametrize("context", [{1: "a", "1": "b"}, {1: "a", "1": "b", (1, "x"): [b"z"], None: 2.5},
                                     {"s": "lone \ud800 surrogate"}, {"a": np.arange(3)}])
def test_mixed_keys_and_odd_values_are_cached(context: dict[Any, Any]) -> None:
    cache = MemoryCache()
    pipe, ret = pipeline(cache)
    first = pipe.search_sync({"query": "q", "limit": 2, "context": context})
    second = pipe.search_sync({"query": "q", "limit": 2, "context": context})
    assert second.metadata.cache_hit and not first.metadata.cache_hit
    assert [d.id for d in second.results] == [d.id for d in first.results] and len(ret.calls) == 1


def test_swapped_values_under_mixed_keys_do_not_share_a_key() -> None:
    cache = MemoryCache()
    pipe, ret = pipeline(cache)
    pipe.search_sync({"query": "q", "context": {1: "a", "1": "b"}})
    resp = pipe.search_sync({"query": "q", "context": {1: "b", "1": "a"}})
    assert not resp.metadata.cache_hit and len(ret.calls) == 2 and len(cache.store) == 2


def test_keys_do_not_depend_on_hash_seed() -> None:
    code = ("from kolm_search.contract.cachekey import canonical_digest as c;"
            "print(c([{'a', 'b', 'c', 'dd'}, frozenset({b'x', b'y'}), {'k': 1, 2: 'v', (3,): None}]))")
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                                timeout=120).stdout)
    assert len(outs) == 1
