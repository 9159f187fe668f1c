"""Import an optional dependency or fail with the extra that provides it."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``; raise ``ImportError`` naming ``pip install 'kolm-search[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{module!r} is not installed: pip install 'kolm-search[{extra}]'") from exc
