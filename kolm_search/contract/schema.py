"""Schema validation of requests and responses (the spec's ``StandardSchemaV1`` slot).

A schema is one of:

- a pydantic model class, or anything that is a :class:`ModelSchema` (``model_validate``),
- a pydantic ``TypeAdapter``, or anything that is an :class:`AdapterSchema` (``validate_python``),
- a callable ``f(value) -> list[SchemaIssue]``, empty when valid.

pydantic is never imported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from kolm_search._extras import peer_isinstance
from kolm_search.errors import KolmTypeError, SchemaIssue, SchemaValidationError

__all__ = ["AdapterSchema", "ModelSchema", "validate_each", "validate_with_schema"]


@runtime_checkable
class ModelSchema(Protocol):
    """A schema that validates by ``model_validate(value)`` (a pydantic model class)."""

    def model_validate(self, obj: Any) -> Any: ...


@runtime_checkable
class AdapterSchema(Protocol):
    """A schema that validates by ``validate_python(value)`` (a pydantic ``TypeAdapter``)."""

    def validate_python(self, obj: Any) -> Any: ...


def _pydantic_issues(exc: Exception) -> list[SchemaIssue] | None:
    if not peer_isinstance(exc, "pydantic", "ValidationError"):
        return None
    try:
        items = exc.errors()  # type: ignore[attr-defined]
    except Exception:
        return None
    return [SchemaIssue(message=str(e.get("msg", e)), path=tuple(e.get("loc", ()))) for e in items]


def validate_with_schema(schema: Any, value: dict[str, Any], target: Literal["input", "output"]) -> None:
    """Validate ``value`` (a JSON-ready dict) against ``schema``.

    Raises
    ------
    SchemaValidationError
        With ``target`` and the issues found.
    KolmTypeError
        When ``schema`` is none of the accepted kinds.
    """
    if schema is None:
        return
    validator = schema.model_validate if isinstance(schema, ModelSchema) else \
        schema.validate_python if isinstance(schema, AdapterSchema) else None
    if validator is not None:
        try:
            validator(value)
        except Exception as exc:
            issues = _pydantic_issues(exc)
            if issues is None:
                issues = [SchemaIssue(message=str(exc), path=())]
            raise SchemaValidationError(target, issues) from exc
        return
    if not callable(schema):
        raise KolmTypeError(
            f"{target}_schema must be a pydantic model, a TypeAdapter or a callable, "
            f"got {type(schema).__name__}"
        )
    result = schema(value)
    if result is None:
        return
    if not isinstance(result, Sequence):
        raise KolmTypeError(f"{target}_schema callable must return a list of SchemaIssue, got {result!r}")
    issues = [
        i if isinstance(i, SchemaIssue) else SchemaIssue(message=str(i), path=()) for i in result
    ]
    if issues:
        raise SchemaValidationError(target, issues)


def validate_each(schema: Any, values: Iterable[tuple[Any, dict[str, Any]]], target: Literal["input", "output"]) -> None:
    """:func:`validate_with_schema` for each ``(qid, value)`` of a batch; the first failure is
    raised with every issue's path starting with the query's id."""
    if schema is None:
        return
    for qid, value in values:
        try:
            validate_with_schema(schema, value, target)
        except SchemaValidationError as exc:
            raise SchemaValidationError(target, [SchemaIssue(i.message, (qid, *i.path)) for i in exc.issues]) from exc
