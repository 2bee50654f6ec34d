"""Stage child processes (trace, lower), their event logs and time bounds."""
