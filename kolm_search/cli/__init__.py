"""The ``kolm-search`` command (``kolm_search.cli:main``); the ``eval`` subcommand is in
``kolm_search.cli.evaluate``."""

from kolm_search.cli.commands import build_parser, main

__all__ = ["build_parser", "main"]
