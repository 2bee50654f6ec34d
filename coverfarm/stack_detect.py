"""Which stack (``coverfarm.stacks``) this environment is, for a CPU worker that is not told.

``COVERFARM_STACK`` names it; without it this is the default stack, the one this checkout's own lock
file installs. (Telling stacks apart by the installed package versions belongs here too.)
"""

from __future__ import annotations

import os

from coverfarm.routes import check_stack_name
from coverfarm.stacks import DEFAULT_STACK

STACK_ENV = "COVERFARM_STACK"


def detect_stack() -> str:
    """``COVERFARM_STACK`` when set (ValueError when it is not a well-formed stack name), else the
    default stack."""
    named = os.environ.get(STACK_ENV, "").strip()
    return check_stack_name(named) if named else DEFAULT_STACK
