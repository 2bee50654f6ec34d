"""``python -m coverfarm_cli`` is the ``coverfarm`` command."""

import sys

from coverfarm_cli import main

sys.exit(main())
