"""The trace stage: the policy adapters (``policies/``), the trace child process (``stage``, run as
``python -m worker.trace.stage``), the trace cache and its key (``cache``), real or fake weights
(``weights``) and building a policy with fake ones (``fake_weights``).

What it may import: of the worker, ``worker.child`` and ``worker.fake_programs`` (a fake-weight trace's
programs, saved).
"""
