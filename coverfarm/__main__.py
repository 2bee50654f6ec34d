"""``python -m coverfarm`` is the ``coverfarm`` command."""

import sys

from coverfarm.cli import main

sys.exit(main())
