"""Optional dependencies: import one or fail with the extra that provides it; recognise its
objects without importing it."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

__all__ = ["peer_isinstance", "require"]


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``; raise ``ImportError`` naming ``pip install 'kolm-search[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{module!r} is not installed: pip install 'kolm-search[{extra}]'") from exc


def peer_isinstance(obj: Any, module: str, *names: str) -> bool:
    """``isinstance(obj, module.name)`` for any of ``names`` (dotted paths inside ``module``), an
    optional library that is not imported for it: an object of the library exists only once
    the library has been imported."""
    found = sys.modules.get(module)
    if found is None:
        return False
    for name in names:
        cls: Any = found
        for part in name.split("."):
            cls = getattr(cls, part, None)
        if isinstance(cls, type) and isinstance(obj, cls):
            return True
    return False
