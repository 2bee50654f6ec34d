"""Test-session settings shared by every test directory.

All tests (and the worker processes they start, which inherit the environment) share one trace cache
for the session, so that each real policy is traced once however many tests and backends use it.
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("COVERFARM_TRACE_CACHE", tempfile.mkdtemp(prefix="coverfarm-traces-"))
