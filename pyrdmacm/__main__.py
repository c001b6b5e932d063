"""``python -m pyrdmacm``: the command-line tool (see pyrdmacm.cli)."""

import sys

from .cli import main

sys.exit(main())
