"""The fuzzing stage: schemathesis over the OpenAPI schema a real ``coverfarm serve`` publishes, on the
embedded default (SQLite) and on Postgres, once with the admin token and once with a healthy runner's
credential. Any 5xx, any response that breaks its published schema, status code or content type fails it.

Bounded: a fixed seed, a fixed number of examples per operation (about half a minute a run on two
cores). ``/api/events`` is left out: an event stream never ends, so no response comes back whole.
The figures of each run (cases, server errors, schema violations) are printed (``-s`` shows them) and
the JSON report is kept in the test's temporary directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from devicetools import make_healthy, probe
from farmkit import recreate_database, session_broker, start_server, stop

pytestmark = pytest.mark.fuzz
# A longer run: COVERFARM_FUZZ_SEED, COVERFARM_FUZZ_EXAMPLES and COVERFARM_FUZZ_TIMEOUT_S (seconds a run).
SEED = int(os.environ.get("COVERFARM_FUZZ_SEED", "21"))
EXAMPLES = int(os.environ.get("COVERFARM_FUZZ_EXAMPLES", "5"))  # per operation and phase
RUN_TIMEOUT_S = float(os.environ.get("COVERFARM_FUZZ_TIMEOUT_S", "300"))
TOKEN = "fuzz-admin-token"
BROKER = session_broker(11)
CHECKS = "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance"
SERVER_ERRORS = {"ServerError"}  # schemathesis's failure type for a 5xx
SCHEMA_VIOLATIONS = {"JsonSchemaError", "MalformedJson", "MissingContentType", "UndefinedContentType",
                     "UndefinedStatusCode", "MissingHeaders"}  # fmt: skip


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """A served farm with one sweep and one healthy runner: (database, URL)."""
    home = tmp_path_factory.mktemp(f"fuzz-{request.param}")
    env = {"COVERFARM_HOME": str(home), "COVERFARM_ADMIN_TOKEN": TOKEN, "COVERFARM_POLICIES": "act,vqbet",
           "COVERFARM_BACKENDS": "vulkan,xnnpack"}  # fmt: skip
    if request.param == "postgres":
        env["COVERFARM_DATABASE_URL"] = recreate_database("coverfarm_test_fuzz")
        env["COVERFARM_BROKER_URL"] = BROKER
        redis.Redis.from_url(BROKER).flushdb()
    process, url = start_server(env, home / "serve.log")
    try:
        yield request.param, url
    finally:
        stop(process)
        log = (home / "serve.log").read_text()
        assert "Traceback" not in log, log[-5000:]


@pytest.fixture(scope="module")
def credentials(served: tuple[str, str]) -> dict[str, str]:
    """The admin token and a healthy runner's credential, with a sweep in the farm."""
    _, url = served
    admin = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, timeout=30) as client:
        client.post("/api/sweeps", headers=admin, json={"policies": ["act"], "backends": ["xnnpack"]})
        token = client.post("/api/enrolment-tokens", headers=admin, json={}).json()["token"]
        enrolled = client.post("/api/runners/enrol", json={"token": token, "name": "fuzz", "probe": probe()})
        runner = {"Authorization": f"Bearer {enrolled.json()['credential']}"}
        make_healthy(client, runner)
    return {"admin": admin["Authorization"], "runner": runner["Authorization"]}


def schemathesis(url: str, authorization: str, report: Path) -> dict[str, Any]:
    command = [
        str(Path(sys.executable).with_name("st")), "run", f"{url}/openapi.json",
        "--header", f"Authorization: {authorization}", "--seed", str(SEED), "--max-examples", str(EXAMPLES),
        "--workers", "1", "--checks", CHECKS, "--exclude-path", "/api/events", "--request-timeout", "30",
        "--generation-database", "none", "--no-color", "--report", "json", "--report-json-path", str(report),
    ]  # fmt: skip
    # In the report's folder: schemathesis keeps its cache (.schemathesis/) in its working directory,
    # which must be no run's but this one's.
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env={**os.environ, "NO_COLOR": "1"},
        cwd=report.parent,
    )  # fmt: skip
    assert report.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    figures: dict[str, Any] = json.loads(report.read_text())
    figures["output"] = done.stdout
    return figures


@pytest.mark.parametrize("who", ["admin", "runner"])
def test_no_server_error_and_no_schema_violation_under_fuzzing(
    served: tuple[str, str], credentials: dict[str, str], who: str, tmp_path: Path
) -> None:
    database, url = served
    run = schemathesis(url, credentials[who], tmp_path / "schemathesis.json")
    failures = run["failures"]
    count = {kind: sum(f["count"] for f in failures if f["type"] in kinds)
             for kind, kinds in (("5xx", SERVER_ERRORS), ("schema", SCHEMA_VIOLATIONS))}  # fmt: skip
    cases, operations, seconds = (run["test_cases"]["generated"], run["operations"]["tested"],
                                  run["running_time"])  # fmt: skip
    print(f"\n[{database}, {who}] schemathesis seed {SEED}: {cases} cases over {operations} operations in "
          f"{seconds:.0f} s; server errors {count['5xx']}, schema violations {count['schema']}, "
          f"other failures {len(failures)}")  # fmt: skip
    assert run["errors"] == [], run["output"][-5000:]
    assert failures == [], run["output"][-8000:]
    assert run["test_cases"]["generated"] > 100 and run["operations"]["tested"] >= 20
