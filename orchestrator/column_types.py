"""The column types the farm's tables use: timezone-aware UTC datetimes on both dialects
(``UTCDateTime``), text clipped to a length when assigned and when written (``ClippedText``, ``clip``;
a state's ``REASON``, a failure's ``ERROR``), JSON that is JSONB on Postgres (``JSONType``), and ids that
auto-increment on SQLite too (``BigId``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Dialect, Integer, Text, TypeDecorator, event
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapper


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC on both dialects (SQLite stores no offset and would hand back naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime: coverfarm stores UTC only")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, keeping its start and its end (a traceback's last
    line says what failed) around a note of how much was cut."""
    if len(text) <= limit:
        return text
    note = f"\n… [{len(text) - limit} characters cut] …\n"
    keep = max(limit - len(note), 0)
    return text[: keep // 2] + note + text[len(text) - (keep - keep // 2) :]


class ClippedText(TypeDecorator[str]):
    """Text stored at most ``limit`` characters long: reasons and errors come from workers and runners,
    and a 5 MiB error would otherwise be stored whole and served back on every listing."""

    impl = Text
    cache_ok = True

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return clip(value, self.limit) if value is not None else None


REASON = ClippedText(2000)  # why a job, worker or runner is in its state
ERROR = ClippedText(20000)  # a failure's cause, traceback included


@event.listens_for(Mapper, "mapper_configured")
def _clip_on_assignment(mapper: Mapper[Any], cls: type) -> None:
    """Clip a ClippedText attribute when it is assigned, not only when it is written: what the request
    answers from the object is then what the database keeps."""
    for column in mapper.columns:
        if isinstance(column.type, ClippedText):
            limit = column.type.limit

            def clip_value(_target: object, value: str | None, _old: object, _initiator: object,
                           limit: int = limit) -> str | None:  # fmt: skip
                return clip(value, limit) if isinstance(value, str) else value

            event.listen(getattr(cls, column.key), "set", clip_value, retval=True)


JSONType = JSON().with_variant(JSONB(), "postgresql")
# SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")
