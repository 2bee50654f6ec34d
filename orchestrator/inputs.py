"""One policy for what a request may carry, applied before any endpoint runs.

- **Ids and offsets** fit the column they are compared with: every id column is a Postgres ``integer``
  (SQLite's would take 2^63, Postgres overflows past 2^31 - 1), so a larger number is a 422, never a
  driver's ``OverflowError``.
- **JSON bodies** hold finite numbers and well-formed strings: ``NaN``, ``Infinity``, ``1e309`` (which
  Python reads as infinity), lone surrogates (``"\\ud800"``, which no database can store as UTF-8) and
  NUL characters (which Postgres text and jsonb refuse) are a 422 naming where they are.
- **Names** (``Name``: a policy, backend, device class or stack, stored or compared with a column) and
  the other strings a path, a query or a body field names (``Text``) hold no NUL character or lone
  surrogate either: a query string is no JSON body, and Postgres refuses a NUL even in a ``WHERE``.
- **Numbers and flags are strict**: ``true`` is not a number of seconds and ``1`` is not a boolean
  (``Number``, ``Count``, ``Flag``); pydantic's lax mode would take both.

A route opts in with ``route_class=StrictJSONRoute`` on its router (every router with a JSON body does).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Path, Query, Request, Response
from fastapi.routing import APIRoute
from pydantic import AfterValidator, Field

# Postgres ``integer``: the type of every id column but the events' (bigint, and ids of events are
# compared with these bounds too: a Last-Event-ID past them names no event either way).
DB_INT_MAX = 2**31 - 1

Id = Annotated[int, Path(ge=1, le=DB_INT_MAX)]
Offset = Annotated[int, Query(ge=0, le=DB_INT_MAX, description="rows to skip")]
# For body fields: strict (a JSON boolean is not a number) and finite.
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Count = Annotated[int, Field(strict=True, le=DB_INT_MAX)]
Flag = Annotated[bool, Field(strict=True)]

_BAD_CHARACTER = re.compile("[\x00\ud800-\udfff]")


def _bad_character(text: str) -> str | None:
    """What is wrong with ``text`` for a database (a NUL character, a lone surrogate), else None."""
    match = _BAD_CHARACTER.search(text)
    if match is None:
        return None
    what = "a NUL character" if match.group() == "\x00" else "a lone surrogate"
    return f"{what} (U+{ord(match.group()):04X})"


def check_text(text: str) -> str:
    """``text`` when a database can store and compare it; ValueError saying what it holds otherwise."""
    wrong = _bad_character(text)
    if wrong is not None:
        raise ValueError(f"holds {wrong}")
    return text


# Any string of a request that is stored or compared with a column.
Text = Annotated[str, AfterValidator(check_text)]
# A policy, backend, device class or stack name: the columns that keep them are 64 characters wide.
Name = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(check_text)]


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number (numbers must be finite)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} does not fit a double (numbers must be finite)")
    return value


def _where(path: list[str | int]) -> str:
    return "".join(f"[{part!r}]" if isinstance(part, str) else f"[{part}]" for part in path) or "the body"


_HOLDS_TEXT = (str, dict, list)


def check_strings(value: Any) -> None:
    """ValueError naming the first string (key or value) with a NUL or a lone surrogate."""
    stack: list[tuple[list[str | int], Any]] = [([], value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if wrong := _bad_character(item):
                raise ValueError(f"the string at {_where(path)} holds {wrong}")
        elif isinstance(item, dict):
            for key, inner in item.items():
                stack.append(([*path, key], inner))
                stack.append(([*path, "<key>"], key))
        elif isinstance(item, list):
            # Numbers hold no string: a result's thousands of raw samples are skipped, not walked.
            stack.extend(
                ([*path, index], inner) for index, inner in enumerate(item) if isinstance(inner, _HOLDS_TEXT)
            )


def strict_loads(body: bytes) -> Any:
    """The body as JSON under the policy above; ``json.JSONDecodeError`` (FastAPI's 422) otherwise."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise json.JSONDecodeError(f"the body is not UTF-8 ({error.reason})", "", error.start) from None
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite)
        check_strings(value)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as error:
        # int() past 4300 digits and nesting past the recursion limit are refusals too, not a 400.
        raise json.JSONDecodeError(str(error) or type(error).__name__, "", 0) from None
    return value


class _StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = strict_loads(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """An API route whose JSON body is read by ``strict_loads``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(_StrictJSONRequest(request.scope, request.receive))

        return strict
