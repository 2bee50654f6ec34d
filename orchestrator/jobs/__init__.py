"""Jobs: their state machine, what workers call to run one, the CPU worker's Celery task (``tasks.py``)
and the reconciler."""
