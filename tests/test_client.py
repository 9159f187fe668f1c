"""SearchClient: guards (stage client), input/output schema validation, sync shell."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from kolm_search import (
    DefaultQueryPlanner,
    SchemaIssue,
    SchemaValidationError,
    SearchClient,
    SearchError,
    SearchRequest,
)
from tests.fakes import ListRetriever


def client(**options: Any) -> SearchClient:
    return SearchClient({"planner": DefaultQueryPlanner(), "retriever": ListRetriever()}, options)


@pytest.mark.parametrize(
    "request_, match",
    [
        ({"query": ""}, "query must not be empty"),
        ({"query": " \t\u2003\n"}, "query must not be empty"),
        ({"query": 5}, "query must be a string"),
        ({"query": "q", "limit": 0}, "limit must be a positive integer, got 0"),
        ({"query": "q", "limit": -3}, "limit.*-3"),
        ({"query": "q", "limit": 2.5}, "limit.*2.5"),
        ({"query": "q", "limit": True}, "limit.*True"),
        ({"query": "q", "offset": -1}, "offset must be a non-negative integer, got -1"),
        ({"query": "q", "offset": "2"}, "offset.*'2'"),
        ({"query": "q", "mode": "semantic"}, "mode must be one of.*'semantic'"),
        ({"query": "q", "filters": [1]}, "filters must be a dict"),
        ({"query": "q", "context": "ctx"}, "context must be a dict"),
        ({"query": "q", "bogus": 1}, "unknown request field.*bogus"),
        ({"limit": 3}, "query.*missing"),
    ],
)
async def test_guards_raise_client_stage(request_: dict[str, Any], match: str) -> None:
    with pytest.raises(SearchError, match=match) as info:
        await client().search(request_)
    assert info.value.stage == "client"
    assert str(info.value).startswith("[client] ")


async def test_not_a_request_at_all() -> None:
    with pytest.raises(SearchError) as info:
        await client().search(["q"])  # type: ignore[arg-type]
    assert info.value.stage == "client"


async def test_max_query_length() -> None:
    c = client(max_query_length=5)
    assert (await c.search({"query": "abcde"})).results
    with pytest.raises(SearchError, match="max_query_length=5") as info:
        await c.search({"query": "abcdef"})
    assert info.value.stage == "client"


@pytest.mark.parametrize("bad", [{"default_limit": 0}, {"default_mode": "x"}, {"max_query_length": 0}, {"cache_ttl_seconds": -1}, {"nope": 1}])
def test_bad_options(bad: dict[str, Any]) -> None:
    with pytest.raises((ValueError, TypeError)):
        client(**bad)


async def test_request_object_and_dict_equivalent() -> None:
    c = client()
    a = await c.search(SearchRequest(query="Hi", limit=3, offset=1))
    b = await c.search({"query": "Hi", "limit": 3, "offset": 1})
    assert [d.id for d in a.results] == [d.id for d in b.results] == ["d1", "d2", "d3"]


class RequestModel(pydantic.BaseModel):
    query: str = pydantic.Field(min_length=3)
    limit: int | None = pydantic.Field(default=None, le=50)
    offset: int = 0
    mode: str | None = None
    filters: dict[str, Any] = {}
    context: dict[str, Any] = {}


@pytest.mark.parametrize("schema", [RequestModel, pydantic.TypeAdapter(RequestModel)])
async def test_pydantic_input_schema(schema: Any) -> None:
    c = client(input_schema=schema)
    assert (await c.search({"query": "long enough"})).results
    with pytest.raises(SchemaValidationError) as info:
        await c.search({"query": "ab", "limit": 100})
    err = info.value
    assert err.target == "input"
    paths = sorted(tuple(i.path) for i in err.issues)
    assert paths == [("limit",), ("query",)]
    assert all(isinstance(i, SchemaIssue) and i.message for i in err.issues)
    assert not isinstance(err, SearchError)


async def test_input_schema_runs_before_empty_query_guard() -> None:
    with pytest.raises(SchemaValidationError):
        await client(input_schema=RequestModel).search({"query": ""})


async def test_callable_schemas_input_and_output() -> None:
    def no_secret(req: dict[str, Any]) -> list[SchemaIssue]:
        return [SchemaIssue("secret queries are not allowed", ["query"])] if "secret" in req["query"] else []

    def at_most_two(resp: dict[str, Any]) -> list[SchemaIssue]:
        n = len(resp["results"])
        return [] if n <= 2 else [SchemaIssue(f"{n} results", ["results"])]

    c = client(input_schema=no_secret, output_schema=at_most_two)
    assert len((await c.search({"query": "ok", "limit": 2})).results) == 2
    with pytest.raises(SchemaValidationError) as info:
        await c.search({"query": "a secret"})
    assert info.value.target == "input" and info.value.issues[0].path == ["query"]
    with pytest.raises(SchemaValidationError) as info:
        await c.search({"query": "ok", "limit": 3})
    assert info.value.target == "output" and "3 results" in str(info.value)


async def test_pydantic_output_schema() -> None:
    class Out(pydantic.BaseModel):
        results: list[dict[str, Any]] = pydantic.Field(max_length=1)

    with pytest.raises(SchemaValidationError) as info:
        await client(output_schema=Out).search({"query": "q", "limit": 2})
    assert info.value.target == "output" and info.value.issues[0].path == ("results",)


async def test_bad_schema_kind() -> None:
    with pytest.raises(TypeError, match="input_schema"):
        await client(input_schema=42).search({"query": "q"})


def test_client_search_sync() -> None:
    assert len(client().search_sync({"query": "q", "limit": 2}).results) == 2


@pytest.mark.parametrize(("item", "match"), [
    (5, r"queries\[1\]: a request must be a SearchRequest or a dict, got int"),
    ({"query": "q", "bogus": 1}, r"queries\[1\]: unknown request field\(s\) \['bogus'\]"),
    ({"limit": 3}, r"queries\[1\]: request field 'query' is missing"),
])
def test_a_batch_item_that_is_no_request_is_refused_naming_its_position(item: Any, match: str) -> None:
    with pytest.raises(SearchError, match=match) as info:
        client().search_batch(["fine", item])
    assert info.value.stage == "client"
