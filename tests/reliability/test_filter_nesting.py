"""Filters nested at random, operators and operands alike, up to thousands of levels: a capped,
named error (field, operator, query) or the right documents; never a ``RecursionError``
(issue 25, defect 14).

The filters are built from the inside out with loops (never recursion), from a list of layers
drawn by hypothesis: operand layers wrap the value in dicts or lists, then a field operator,
field-level ``$not`` layers, the field clause, and top-level ``$and``/``$or``/``$nor``/``$not``
layers. Oracle: a filter nested within the cap selects what the plain-Python evaluator of
``tests/test_filters.py`` selects; one past it is refused with the cap's message naming the
field (when the nesting is below a field) and, through a client, the query's position.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search import SearchDocument, SearchError, presets
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.filters import MAX_DEPTH
from kolm_search.errors import KolmError
from tests.test_filters import oracle

DOCS = [SearchDocument(id=f"d{i}", content="alpha beta" if i % 2 else "alpha",
                       metadata={"author": {"a": {"a": i % 3}} if i % 4 else [1, [2, [3]]], "year": 2000 + i})
        for i in range(12)]
TOP = ("$and", "$or", "$nor", "$not")


def _wrap_value(value: Any, kinds: list[str]) -> Any:
    for kind in kinds:
        value = {"a": value} if kind == "dict" else [value]
    return value


def build(operand_layers: list[str], op: str, nots: int, top: list[str]) -> tuple[dict[str, Any], int, int]:
    """The filter, its operand's nesting depth and its operators' nesting depth."""
    value = _wrap_value(1, operand_layers)
    cond: Any = {op: value} if op != "bare" else value
    for _ in range(nots):
        cond = {"$not": cond if isinstance(cond, dict) and all(str(k).startswith("$") for k in cond) else {"$eq": cond}}
    f: dict[str, Any] = {"author": cond}
    for op_name in top:
        f = {op_name: f} if op_name == "$not" else {op_name: [f, {"year": {"$gte": 2003}}]}
    return f, len(operand_layers), nots + len(top)


layers = st.lists(st.sampled_from(["dict", "list"]), max_size=6)
huge = st.integers(MAX_DEPTH - 2, 2_500)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(layers, huge.map(lambda n: ["dict"] * n), huge.flatmap(lambda n: st.just(["list", "dict"] * (n // 2)))),
       st.sampled_from(["$eq", "$ne", "$in", "$nin", "bare"]),
       st.one_of(st.integers(0, 4), huge), st.one_of(st.lists(st.sampled_from(TOP), max_size=4), huge.map(lambda n: ["$not"] * n)))
def test_random_nesting_is_a_named_capped_error_or_the_right_documents(operand: list[str], op: str, nots: int,
                                                                        top: list[str]) -> None:
    f, operand_depth, operator_depth = build(operand, op, nots, top)
    table = DocumentTable.from_documents(DOCS)
    named_operand = bool(operand) and operand[-1] == "dict" and op in ("$eq", "$ne", "bare")  # a dict operand
    try:
        got = table.filter_mask(f)
    except KolmError as exc:
        message = str(exc)
        if operator_depth >= MAX_DEPTH:  # the operators' cap comes first, on the way down
            assert f"nested deeper than {MAX_DEPTH} levels" in message and "operand" not in message, message
        elif operand_depth > MAX_DEPTH and named_operand:
            shown = "$ne" if op == "$ne" else "$eq"
            assert message == (f"filter on field 'author', operator '{shown}': the operand is nested deeper than "
                               f"{MAX_DEPTH} levels"), message
        elif operand_depth <= MAX_DEPTH and named_operand:
            raise AssertionError(f"a dict operand {operand_depth} deep is within the cap: {message}") from exc
        if operand_depth <= 6 and operator_depth <= 8:  # shallow: refused only where the oracle refuses
            assert oracle(f, DOCS) is None, (f, message)
        return
    assert operator_depth < MAX_DEPTH and operand_depth <= MAX_DEPTH
    if operand_depth <= 6 and operator_depth <= 8:
        want = oracle(f, DOCS)
        assert want is not None
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("wrap", ["dict", "list in dict"])
def test_an_operand_2000_deep_names_field_operator_and_query(wrap: str) -> None:
    """On main: ``SearchError: [retriever] RecursionError ... encoding a JSON object``."""
    value: Any = 1
    for _ in range(2_000):
        value = {"a": value}
    if wrap == "list in dict":
        for _ in range(2_000):
            value = [value]
        value = {"k": value}
    client = presets.bm25(DOCS)
    with pytest.raises(SearchError) as single:
        client.search_sync({"query": "alpha", "filters": {"author": {"$eq": value}}})
    assert "field 'author', operator '$eq': the operand is nested deeper than 64 levels" in str(single.value)
    with pytest.raises(SearchError) as batch:
        client.search_batch(["alpha", {"query": "beta", "filters": {"author": value}}])
    assert "query 1 (position in the batch)" in str(batch.value)
    assert "field 'author', operator '$eq': the operand is nested deeper than 64 levels" in str(batch.value)
    with pytest.raises(SearchError, match=r"filters must be a dict, got list \["):
        client.search_batch(["alpha"], filters=[value])  # type: ignore[arg-type]  # its repr is bounded too
    fine = value if wrap == "dict" else None
    if fine is not None:  # 64 levels are accepted
        ok: Any = 1
        for _ in range(MAX_DEPTH - 1):
            ok = {"a": ok}
        assert client.search_sync({"query": "alpha", "filters": {"author": {"$eq": ok}}}).results == []


def test_a_document_value_nested_deeper_than_the_cap_is_named() -> None:
    deep: Any = 1
    for _ in range(3_000):
        deep = [deep]
    table = DocumentTable.from_documents([SearchDocument(id="x", content="c", metadata={"author": deep}),
                                          SearchDocument(id="y", content="c", metadata={"author": "me"})])
    with pytest.raises(KolmError, match=r"field 'author': document 'x' has a value nested deeper than 64 levels"):
        table.filter_mask({"author": "me"})
    assert list(table.filter_mask({"id": "y"})) == [False, True]  # other fields still filter
