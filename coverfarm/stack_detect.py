"""Which stack (``coverfarm.stacks``) this environment is, for a CPU worker that is not told.

``COVERFARM_STACK`` names it (any well-formed name, so a stack being tried need not be in the catalogue
yet); without it the stack is detected from the installed versions by ``coverfarm.stacks``, and where
they match no stack of the catalogue it is the default stack, with the reason logged.
"""

from __future__ import annotations

import os

from coverfarm.routes import check_stack_name
from coverfarm.stacks import current_stack

STACK_ENV = "COVERFARM_STACK"


def detect_stack() -> str:
    """``COVERFARM_STACK`` when set (ValueError when it is not a well-formed stack name), else the
    stack of the installed versions (``coverfarm.stacks.current_stack``)."""
    named = os.environ.get(STACK_ENV, "").strip()
    return check_stack_name(named) if named else current_stack()
