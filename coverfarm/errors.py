"""Errors that mean the user asked for something wrong (shown as one line, never a traceback)."""


class UserError(Exception):
    """A mistake in the command line or its inputs: printed as one line, exit status 2."""


def one_line(text: str) -> str:
    """``text`` as one line (its lines joined with "; "): a command's refusal is one line on stderr."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())
