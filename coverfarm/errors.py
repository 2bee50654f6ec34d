"""Errors that mean the user asked for something wrong (shown as one line, never a traceback)."""


class UserError(Exception):
    """A mistake in the command line or its inputs: printed as one line, exit status 2."""
