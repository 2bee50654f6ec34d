"""What a request may carry (orchestrator/inputs.py) and what the farm answers when it carries more: ids
past the columns, numbers that are not finite or not numbers, strings no database stores, bodies past
the limit, a wrong method, and the shapes the OpenAPI schema publishes for each refusal."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, get_args

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from coverfarm.device_result import Board, ExecutorchInfo, ProbeReport
from coverfarm.settings import Settings
from orchestrator.models import EnrolmentToken, Sweep

INTEGER_MAX = 2**31 - 1  # Postgres integer, every id column's type
BIG = [INTEGER_MAX + 1, 2**63, 2**64]
SWEEP = {"policies": ["act"], "backends": ["vulkan"]}


def sweeps_stored(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(Sweep)) or 0


@pytest.mark.parametrize("number", BIG)
@pytest.mark.parametrize(
    "path",
    [
        "/api/sweeps/{n}",
        "/api/cells/{n}",
        "/api/sweeps/{n}/report.md",
        "/api/sweeps/{n}/blockers",
        "/api/sweeps/1/diff/{n}",
        "/api/sweeps/{n}/diff/1.md",
        "/api/sweeps?offset={n}",
        "/api/workers?offset={n}",
        "/api/runners?offset={n}",
        "/sweeps/{n}",
        "/cells/{n}",
        "/?offset={n}",
    ],
)
def test_ids_and_offsets_past_the_columns_are_422(client: TestClient, path: str, number: int) -> None:
    response = client.get(path.format(n=number))
    assert response.status_code == 422, response.text


@pytest.mark.parametrize("number", BIG)
def test_admin_ids_past_the_columns_are_422(client: TestClient, admin: dict[str, str], number: int) -> None:
    for method, path in (("POST", "/api/sweeps/{n}/cancel"), ("POST", "/api/runners/{n}/revoke"),
                         ("DELETE", "/api/runners/{n}")):  # fmt: skip
        response = client.request(method, path.format(n=number), headers=admin)
        assert response.status_code == 422, (path, response.text)
    stream = client.get(f"/api/events?sweep={number}")
    assert stream.status_code == 422


@pytest.mark.parametrize(
    "credential",
    ["99999999999999999999.x", "²1.secret", "1²2.secret", "-1.x", "0.x", "1.", ".x", "nodot", "1"],
)
def test_malformed_runner_credentials_are_401(client: TestClient, credential: str) -> None:
    # Latin-1 on the wire, as Starlette reads headers: "²" arrives as "²", which str.isdigit takes.
    headers = {"Authorization": f"Bearer {credential}".encode("latin-1")}
    response = client.post("/api/runners/me/heartbeat", headers=headers)
    assert response.status_code == 401, response.text
    assert response.json()["detail"].startswith("unknown runner credential")
    assert client.get(f"/api/artifacts/{'0' * 64}", headers=headers).status_code == 401


def raw(client: TestClient, path: str, body: str, headers: dict[str, str]) -> Any:
    return client.post(path, content=body.encode("utf-8", "surrogatepass"),
                       headers={**headers, "Content-Type": "application/json"})  # fmt: skip


@pytest.mark.parametrize(
    "value",
    ["NaN", "Infinity", "-Infinity", "1e309", "-1e400", "true", "false", '"30"'],
)
def test_timeouts_that_are_not_finite_numbers_are_422(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], value: str
) -> None:
    before = sweeps_stored(sessions)
    sweep = raw(
        client, "/api/sweeps", f'{{"policies": ["act"], "backends": ["vulkan"], "timeout_s": {value}}}', admin
    )
    assert sweep.status_code == 422, sweep.text
    token = raw(client, "/api/enrolment-tokens", f'{{"expires_in_s": {value}}}', admin)
    assert token.status_code == 422, token.text
    assert sweeps_stored(sessions) == before
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(EnrolmentToken)) == 0


def test_flags_are_booleans(client: TestClient, admin: dict[str, str]) -> None:
    for flag in (1, "true", "yes"):
        body = {**SWEEP, "options": {"constant_prop": flag}}
        assert client.post("/api/sweeps", headers=admin, json=body).status_code == 422
    ok = client.post("/api/sweeps", headers=admin, json={**SWEEP, "options": {"constant_prop": False}})
    assert ok.status_code == 201 and ok.json()["options"]["constant_prop"] is False


@pytest.mark.parametrize("name", ['"\\ud800"', '"a\\udfffb"', '"act\\u0000"', '"\\u0000"'])
def test_strings_no_database_stores_are_422_naming_where(
    client: TestClient, admin: dict[str, str], sessions: sessionmaker[Session], name: str
) -> None:
    before = sweeps_stored(sessions)
    response = raw(client, "/api/sweeps", f'{{"policies": [{name}], "backends": ["vulkan"]}}', admin)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert "['policies'][0]" in error["ctx"]["error"]
    response.json()  # the answer itself is valid UTF-8 JSON
    # A key is checked too, and the body may be invalid UTF-8 outright.
    assert raw(client, "/api/sweeps", '{"\\ud800": 1}', admin).status_code == 422
    assert client.post("/api/sweeps", headers={**admin, "Content-Type": "application/json"},
                       content=b'{"policies": ["\xff"]}').status_code == 422  # fmt: skip
    assert sweeps_stored(sessions) == before


def test_huge_integers_and_deep_nesting_are_422_not_400(client: TestClient, admin: dict[str, str]) -> None:
    digits = raw(client, "/api/sweeps", '{"timeout_s": ' + "9" * 5000 + "}", admin)
    assert digits.status_code == 422, digits.text
    deep = raw(client, "/api/sweeps", "[" * 100_000 + "]" * 100_000, admin)
    assert deep.status_code in (413, 422), deep.text


def test_a_body_past_the_limit_is_413_and_a_422_echoes_no_large_input(
    client: TestClient, admin: dict[str, str], settings: Settings, sessions: sessionmaker[Session]
) -> None:
    before = sweeps_stored(sessions)
    big = {**SWEEP, "padding": "x" * (settings.max_body_bytes + 1)}
    too_large = client.post("/api/sweeps", headers=admin, json=big)
    assert too_large.status_code == 413, too_large.text[:200]
    assert len(too_large.content) < 1000
    # Under the limit but refused: the answer names the field without sending the input back.
    refused = client.post("/api/sweeps", headers=admin, json={**SWEEP, "padding": "x" * 500_000})
    assert refused.status_code == 422
    assert len(refused.content) < 2000, len(refused.content)
    assert refused.json()["detail"][0]["loc"] == ["body", "padding"]
    long_name = client.post("/api/sweeps", headers=admin, json={**SWEEP, "policies": ["p" * 100_000]})
    assert long_name.status_code == 422 and len(long_name.content) < 2000
    assert sweeps_stored(sessions) == before


def test_artifact_address_with_a_trailing_newline_is_422(client: TestClient, admin: dict[str, str]) -> None:
    response = client.get(f"/api/artifacts/{'a' * 64}%0A", headers=admin)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["path", "sha256"]
    assert client.get(f"/api/artifacts/{'a' * 64}", headers=admin).status_code == 404


def test_a_wrong_method_is_405(client: TestClient, admin: dict[str, str]) -> None:
    for method, path in (("DELETE", "/api/runners/enrol"), ("GET", "/api/runners/enrol"),
                         ("PUT", "/api/sweeps/1"), ("DELETE", "/api/sweeps")):  # fmt: skip
        assert client.request(method, path, headers=admin).status_code == 405, (method, path)


def operations(client: TestClient) -> dict[tuple[str, str], dict[str, Any]]:
    schema: dict[str, Any] = client.get("/openapi.json").json()
    return {(method, path): op for path, item in schema["paths"].items() for method, op in item.items()}


def test_the_schema_publishes_every_refusal_the_endpoints_give(client: TestClient) -> None:
    ops = operations(client)
    expected = {
        ("post", "/api/sweeps"): {"201", "401", "413", "422"},
        ("get", "/api/sweeps/{sweep_id}"): {"200", "404", "422"},
        ("post", "/api/sweeps/{sweep_id}/cancel"): {"200", "401", "404", "422"},
        ("post", "/api/enrolment-tokens"): {"201", "401", "413", "422"},
        ("post", "/api/runners/enrol"): {"201", "401", "413", "422"},
        ("post", "/api/runners/me/heartbeat"): {"200", "401", "403"},
        ("post", "/api/device-jobs/{job_id}/claim"): {"200", "401", "403", "404", "409", "422", "423"},
        ("post", "/api/device-jobs/{job_id}/result"): {"204", "401", "403", "404", "409", "413", "422"},
        ("post", "/api/device-jobs/{job_id}/infra-error"): {"204", "401", "403", "404", "409", "413", "422"},
        ("get", "/api/artifacts/{sha256}"): {"200", "401", "403", "404", "422"},
        ("post", "/api/results/import"): {"201", "401", "403", "413", "422"},
    }
    for key, codes in expected.items():
        assert set(ops[key]["responses"]) == codes, key
        for code in codes - {"200", "201", "204", "422"}:
            schema = ops[key]["responses"][code]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/Detail"}, (key, code)
    assert set(ops[("get", "/api/artifacts/{sha256}")]["responses"]["200"]["content"]) == {
        "application/x-tar"
    }
    for markdown in ("/api/sweeps/{sweep_id}/report.md", "/api/sweeps/{a}/diff/{b}.md"):
        answers = ops[("get", markdown)]["responses"]
        assert set(answers["200"]["content"]) == {"text/markdown"}
        assert set(answers["404"]["content"]) == {"application/json"}  # its refusals are JSON


def test_service_422s_have_the_published_validation_shape(client: TestClient, admin: dict[str, str]) -> None:
    """Refusals raised by services (an unknown policy; a device class the farm has no backend for) read
    like FastAPI's own 422: a list of {loc, msg, type}, as HTTPValidationError says."""
    token = client.post("/api/enrolment-tokens", headers=admin, json={}).json()["token"]
    probe = ProbeReport(
        board=Board(cores=1, arch="x86_64"), vulkan_status="none", executorch=ExecutorchInfo(version="1.5.1")
    )
    enrol = client.post(
        "/api/runners/enrol", json={"token": token, "name": "b", "probe": probe.model_dump(mode="json")}
    )
    unknown = client.post("/api/sweeps", headers=admin, json={"policies": ["nope"], "backends": ["vulkan"]})
    for response in (enrol, unknown):
        assert response.status_code == 422, response.text
        for error in response.json()["detail"]:
            assert set(error) >= {"loc", "msg", "type"} and isinstance(error["loc"], list), error
            json.dumps(error)


def _admits_text(annotation: Any) -> bool:
    return annotation is str or any(_admits_text(inner) for inner in get_args(annotation))


def _routes(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, APIRoute]]:
    for route in routes:
        if isinstance(route, APIRoute):
            yield prefix + re.sub(r":\w+}", "}", route.path), route
        elif hasattr(route, "original_router"):  # an included router
            yield from _routes(route.original_router.routes, prefix + route.include_context.prefix)


def name_parameters(client: TestClient) -> list[tuple[str, str, str]]:
    """(path template, where, name) of every string a GET route takes in its query or its path, the
    dashboard's included: each is stored or compared with a column, or matched against a rule."""
    found = []
    for path, route in _routes(client.app.routes):  # type: ignore[attr-defined]
        if "GET" in route.methods:
            places = (("query", route.dependant.query_params), ("path", route.dependant.path_params))
            for where, fields in places:
                found.extend((path, where, f.name) for f in fields if _admits_text(f.field_info.annotation))
    return found


def test_the_name_parameters_are_found(client: TestClient) -> None:
    found = {(path, name) for path, _, name in name_parameters(client)}
    assert {("/api/sweeps/{sweep_id}/cells", "policy"), ("/api/sweeps/{sweep_id}/cells", "backend"),
            ("/api/sweeps/{sweep_id}/device-bundles", "device_class"), ("/api/artifacts/{sha256}", "sha256"),
            ("/sweeps/{sweep_id}", "stack"), ("/sweeps/{sweep_id}/blockers", "backend")} <= found  # fmt: skip
    assert len(found) >= 15, found


@pytest.mark.parametrize("value", ["a%00b", "%00", "act%00"])
def test_a_nul_in_any_name_parameter_is_422_naming_it_on_postgres(
    client: TestClient, admin: dict[str, str], value: str
) -> None:
    """``?policy=a%00b`` reached Postgres, whose driver refuses a NUL even in a WHERE (a 500); every
    string parameter of a query or a path is a Name (orchestrator/inputs.py), refused before."""
    assert client.app.state.settings.sqlalchemy_url.startswith("postgresql")  # type: ignore[attr-defined]
    sweep = client.post("/api/sweeps", headers=admin, json=SWEEP).json()["id"]
    good = {"policy": "act", "backend": "vulkan", "device_class": "cpu-x86_64-xnnpack", "sha256": "0" * 64}
    for template, where, name in name_parameters(client):
        ids = {"sweep_id": sweep, "cell_id": 1, "a": sweep, "b": sweep}
        if where == "path":  # every other path parameter well formed
            url = template.format(**{**ids, "sha256": "0" * 64, "name": "manifest.json", name: value})
        else:
            url = template.format(**ids, **{key: "x" for key in ("sha256", "name")}) + f"?{name}={value}"
        response = client.get(url, headers=admin)
        assert response.status_code == 422, (url, response.text)
        [error] = response.json()["detail"]
        assert error["loc"][:2] == [where, name], (url, error)
        if where == "query":
            assert "NUL character" in error["msg"], (url, error)
            # The same parameter with a name the farm knows is answered.
            fine = template.format(**ids) + f"?{name}={good.get(name, 'et-1.5.1')}"
            assert client.get(fine, headers=admin).status_code == 200, fine
