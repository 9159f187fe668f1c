"""One exception tree: every exception class the package defines derives from KolmError."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import kolm_search
from kolm_search import errors
from kolm_search.errors import KolmError

SECOND_BASES = {
    "KolmValueError": ValueError, "FrameValidationError": ValueError, "KolmTypeError": TypeError,
    "DownloadError": OSError, "LLMRequestError": RuntimeError, "DistributedError": RuntimeError,
}


def _exception_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(kolm_search.__path__, "kolm_search."):
        try:
            module = importlib.import_module(info.name)
        except ImportError as exc:  # an optional extra that is not installed
            pytest.skip(f"{info.name}: {exc}")
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__.startswith("kolm_search"):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def test_every_exception_class_is_a_kolm_error() -> None:
    classes = _exception_classes()
    assert len(classes) >= 9  # the walk sees the tree
    for name, cls in classes.items():
        assert issubclass(cls, KolmError), name
        assert cls.__module__ == "kolm_search.errors", f"{name} should live in kolm_search.errors"


def test_second_bases_and_drawn_tree() -> None:
    for name, base in SECOND_BASES.items():
        assert issubclass(getattr(errors, name), base), name
    doc = errors.__doc__ or ""
    for cls in _exception_classes().values():
        assert cls.__name__ in doc, f"{cls.__name__} is missing from the tree in errors.py's docstring"


def test_reexported_errors_are_the_same_classes() -> None:
    from kolm_search.adapters import LLMRequestError
    from kolm_search.distributed import DistributedError

    assert LLMRequestError is errors.LLMRequestError and DistributedError is errors.DistributedError
