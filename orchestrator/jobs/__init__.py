"""Jobs: their state machine, what workers call to run one, and the reconciler."""
