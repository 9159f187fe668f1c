"""update_with_column (the column digests that key an experiment's caches by its queries and
qrels) and the two digests made with it: equal values digest alike whatever their chunking or
slicing, any change of a value, a boundary between strings or a dtype changes the digest, and
what cannot be digested alike each time is refused (None), never digested wrongly."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search.compose.queries import queries_digest
from kolm_search.engine.column_digest import update_with_column
from kolm_search.evaluation.table_cache import qrels_digest


def digest(column: pd.Series, name: str = "c") -> tuple[str | None, str]:
    sha = hashlib.sha256()
    kind = update_with_column(sha, name, column)
    return kind, sha.hexdigest()


def arrow_series(chunks: list[list[str]], kind: pa.DataType | None = None) -> pd.Series:
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array(chunks, kind or pa.string())))


def test_kinds_of_the_columns_taken() -> None:
    assert digest(pd.Series([1, 2], dtype=np.int32))[0] == "int"
    assert digest(pd.Series([1.5, 2.0]))[0] == "float"
    assert digest(pd.Series(["a", "b"], dtype=object))[0] == "str"
    assert digest(pd.Series(["a", "b"], dtype="string[pyarrow]"))[0] == "str"
    assert digest(pd.Series(["b", "a", "b"], dtype="category"))[0] == "str"
    assert digest(pd.Series([3, 1, 3]).astype("category"))[0] == "int"
    assert digest(pd.Series([1, 2], dtype="Int64"))[0] == "int"
    assert digest(pd.Series([1, "a"], dtype=object))[0] is None  # mixed
    assert digest(pd.Series([True, False]))[0] is None  # not a number nor a string
    assert digest(pd.Series([b"x"], dtype=object))[0] is None


@pytest.mark.parametrize("column", [
    pd.Series([1.0, np.nan]), pd.Series(["a", None], dtype=object), pd.Series(["a", None], dtype="string[pyarrow]"),
    pd.Series([1, None], dtype="Int64"), pd.Series(["a", None], dtype="category"),
], ids=["float-nan", "object-none", "arrow-null", "nullable-int", "categorical-missing"])
def test_a_missing_value_is_refused(column: pd.Series) -> None:
    assert digest(column)[0] is None


def test_chunking_slicing_and_storage_do_not_change_a_digest() -> None:
    whole = arrow_series([["alpha", "", "beta", "γδ"]])
    assert digest(arrow_series([["alpha"], [], ["", "beta"], ["γδ"]])) == digest(whole)
    sliced = pa.array(["zz", "alpha", "", "beta", "γδ", "yy"]).slice(1, 4)
    assert digest(pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array([sliced])))) == digest(whole)
    plain = pd.Series(["alpha", "", "beta", "γδ"], dtype=object)
    assert digest(plain) == digest(plain.copy())
    assert digest(pd.Series([], dtype="string[pyarrow]"))[0] == "str"
    assert digest(pd.Series([], dtype=object))[0] is None  # no values to tell a type by (a caller digests otherwise)
    assert queries_digest(pd.DataFrame({"qid": [], "query": []}, dtype=object)) is not None


def test_boundaries_values_names_and_dtypes_change_a_digest() -> None:
    base = digest(arrow_series([["ab", "c"]]))
    assert digest(arrow_series([["a", "bc"]])) != base  # the same bytes, another boundary
    assert digest(arrow_series([["ab", "d"]])) != base
    assert digest(arrow_series([["ab", "c"]]), name="d") != base
    assert digest(arrow_series([["ab", "c"]], pa.large_string())) != base  # another dtype: another entry
    assert digest(pd.Series([1, 2], dtype=np.int32)) != digest(pd.Series([1, 2], dtype=np.int64))
    codes = pd.Series(pd.Categorical(["a", "b"], categories=["a", "b"]))
    assert digest(pd.Series(pd.Categorical(["a", "b"], categories=["b", "a"]))) != digest(codes)
    assert digest(pd.Series(pd.Categorical(["b", "a"], categories=["a", "b"]))) != digest(codes)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.text(max_size=4), max_size=5), min_size=2, max_size=2))
def test_string_columns_digest_alike_exactly_when_their_values_are_equal(pair: list[list[str]]) -> None:
    a, b = (digest(pd.Series(values, dtype=object)) for values in pair)
    assert (a == b) == (pair[0] == pair[1])
    assert digest(pd.Series(pair[0], dtype="string[pyarrow]"))[0] == "str"


def test_queries_digest_takes_integer_or_string_qids_and_string_queries() -> None:
    frame = pd.DataFrame({"qid": ["1", "2"], "query": ["a b", "c"]})
    base = queries_digest(frame, limit=10)
    assert base is not None and base == queries_digest(frame.copy(), limit=10)
    assert queries_digest(frame, limit=11) != base
    assert queries_digest(frame.assign(query=["a", "b c"]), limit=10) not in (base, None)
    assert queries_digest(frame.assign(qid=[1, 2]), limit=10) not in (base, None)
    assert queries_digest(frame.assign(qid=[1.0, 2.0]), limit=10) is None  # a qid neither str nor int
    assert queries_digest(frame.assign(query=[1, 2]), limit=10) is None
    assert queries_digest(frame.assign(query=["a", None]), limit=10) is None
    twice = pd.concat([frame, frame[["qid"]]], axis=1)
    assert queries_digest(twice, limit=10) is None  # a name given to two columns


def test_qrels_digest_by_columns() -> None:
    qrels = pd.DataFrame({"qid": ["1", "1", "2"], "doc_id": ["d1", "d2", "d1"], "relevance": [1, 2, 1]})
    base = qrels_digest(qrels)
    assert base is not None and base == qrels_digest(qrels.copy())
    as_categories = qrels.astype({"qid": "category", "doc_id": "category"})
    assert qrels_digest(as_categories) not in (base, None)
    assert qrels_digest(qrels.assign(relevance=[1, 2, 2])) != base
    assert qrels_digest(qrels.rename(columns={"relevance": "label"})) != base


def test_qrels_digest_of_two_columns_of_one_name_digested_otherwise() -> None:
    """A name given to two columns, one the column digest refuses (a NaN): digested by pandas,
    not an AttributeError of the frame ``qrels[name]`` is then."""
    qrels = pd.DataFrame({"qid": ["1", "2"], "doc_id": ["a", "b"], "relevance": [1, 2]})
    twice = pd.concat([qrels, pd.DataFrame({"relevance": [1.0, np.nan]})], axis=1)
    found = qrels_digest(twice)
    assert found is not None and found not in (qrels_digest(qrels), qrels_digest(twice.iloc[:, :3]))
    assert qrels_digest(twice.copy()) == found
