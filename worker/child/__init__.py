"""What every stage's child process runs under: per-phase time bounds and its peak memory per phase
(``bounded``), and the event log it writes (``events``).

What it may import: of the worker, nothing (it is the bottom of the worker's order).
"""
