"""``python -m crawler.cli``: the ``crawler`` command."""

import sys

from crawler.cli import main

sys.exit(main())
