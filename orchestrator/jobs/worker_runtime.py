"""What one CPU worker process holds (``Runtime``: its settings, database, Celery app, stack and memory
per job), the engine it runs (``settings.engine``, a plugin loaded by its ``module:function`` name,
``load_engine``), and its transactions with a database that may be away for a while (``patiently``,
then ``DatabaseGone``)."""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from celery import Celery
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.result import Options, ResultDocument
from coverfarm.settings import Settings
from coverfarm.stacks import DEFAULT_STACK
from orchestrator.db import unit_of_work

log = logging.getLogger(__name__)


class DatabaseGone(Exception):
    """The farm's database did not answer for as long as the worker waits for it."""


class Analyzer(Protocol):
    """worker.engine.analyze's signature."""

    def __call__(
        self,
        policy: str,
        backend: str,
        options: Options,
        out_dir: Path,
        progress: Callable[[str], None] | None = None,
    ) -> ResultDocument: ...


def load_engine(spec: str) -> Analyzer:
    module_name, _, attribute = spec.partition(":")
    if not attribute:
        raise ValueError(f"engine {spec!r} must be 'module:function'")
    analyze: Analyzer = getattr(importlib.import_module(module_name), attribute)
    return analyze


@dataclass
class Runtime:
    """What one worker process needs, built lazily per process (prefork children must not share
    the parent's database connections)."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    celery: Celery
    pid: int
    stack: str = DEFAULT_STACK
    memory_gb: float | None = None  # each job's share; None: unknown (no MemTotal, no setting)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        with unit_of_work(self.sessions, self.celery) as session:
            yield session


def patiently[T](rt: Runtime, what: str, work: Callable[[Session], T]) -> T:
    """``work`` in one transaction; while the database does not answer, again after 1, 2, 4 … s, for up to
    ``heartbeat_timeout_s`` (past it the reconciler treats the job as lost anyway); then DatabaseGone."""
    deadline = time.monotonic() + rt.settings.heartbeat_timeout_s
    wait = 1.0
    while True:
        try:
            with rt.transaction() as session:
                return work(session)
        except OperationalError as error:
            if time.monotonic() + wait > deadline:
                raise DatabaseGone(f"{what}: the database did not answer ({error.orig!r})") from None
            log.warning("%s: the database did not answer; trying again in %.0f s", what, wait)
            time.sleep(wait)
            wait = min(wait * 2, 30.0)
