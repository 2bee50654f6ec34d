"""Stacks: a named, pinned set of the packages a lowering depends on (executorch, torch and what else
differs), so that one sweep can measure several ExecuTorch releases side by side.

Every cell, CPU worker and lower job belongs to one stack. ``DEFAULT_STACK`` is the stack of this
checkout's own lock file (``requirements/lock.txt``); rows stored before stacks existed read as it.
"""

from __future__ import annotations

DEFAULT_STACK = "et-1.5.1"
