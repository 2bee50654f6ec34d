"""Every query on artifact metadata."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from orchestrator.artifacts.store import Stored
from orchestrator.models import Artifact, utcnow


def record(session: Session, stored: Stored) -> None:
    """Remember a stored bundle (idempotent: the same sha256 is the same content)."""
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    session.execute(
        insert(Artifact)
        .values(sha256=stored.sha256, size_bytes=stored.size_bytes, files=stored.files, created_at=utcnow())
        .on_conflict_do_nothing(index_elements=[Artifact.sha256])
    )


def known(session: Session, sha256: str) -> bool:
    return session.scalar(select(Artifact.sha256).where(Artifact.sha256 == sha256)) is not None
