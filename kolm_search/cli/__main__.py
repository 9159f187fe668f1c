"""``python -m kolm_search.cli``: the ``kolm-search`` command."""

import sys

from kolm_search.cli import main

if __name__ == "__main__":
    sys.exit(main())
