"""Sweeps accept every tracker policy (those LeRobot lacks keep their rows) and the weights option."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from coverfarm import catalog
from coverfarm.result import Options
from coverfarm.settings import Settings
from orchestrator.errors import Invalid
from orchestrator.models import Cell
from orchestrator.sweeps.schemas import SweepCreate
from orchestrator.sweeps.service import _check


def test_the_farm_accepts_all_25_tracker_policies_by_default(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    assert settings.policies == list(catalog.POLICIES)
    _check(SweepCreate(policies=list(catalog.POLICIES), backends=["vulkan", "xnnpack"]), settings)


def test_an_unknown_policy_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(Invalid) as raised:
        _check(SweepCreate(policies=["dm05", "nope"], backends=["vulkan"]), Settings(home=tmp_path))
    (error,) = raised.value.errors
    assert error["loc"] == ["body", "policies", 1]
    assert "unknown policy 'nope'" in error["msg"]


def test_weights_is_a_sweep_option_recorded_in_every_cell(
    client: TestClient, admin: dict[str, str], session: Session
) -> None:
    def stored_weights(options: dict[str, str]) -> set[str]:
        """The weights the engine is given: each stored cell's options, read back as the worker does."""
        body = {"policies": ["act"], "backends": ["vulkan", "xnnpack"], "options": options}
        response = client.post("/api/sweeps", json=body, headers=admin)
        assert response.status_code == 201, response.text
        cells = session.scalars(select(Cell).where(Cell.sweep_id == response.json()["id"])).all()
        assert len(cells) == 2
        return {Options.model_validate(cell.options).weights for cell in cells}

    assert stored_weights({"weights": "fake"}) == {"fake"}
    assert stored_weights({}) == {"auto"}  # the engine's default when the sweep does not choose


def test_an_unknown_weights_mode_is_422(client: TestClient, admin: dict[str, str]) -> None:
    body = {"policies": ["act"], "backends": ["vulkan"], "options": {"weights": "half"}}
    response = client.post("/api/sweeps", json=body, headers=admin)
    assert response.status_code == 422
    assert "weights" in response.text


def test_force_fp16_is_recorded_in_the_vulkan_cells_only(client: TestClient, admin: dict[str, str]) -> None:
    body = {"policies": ["act"], "backends": ["vulkan", "xnnpack"], "options": {"force_fp16": True}}
    response = client.post("/api/sweeps", json=body, headers=admin)
    assert response.status_code == 201, response.text
    sweep = response.json()
    assert sweep["options"]["force_fp16"] is True
    recorded = {c["backend"]: c["options"]["force_fp16"] for c in sweep["cells"]}
    assert recorded == {"vulkan": True, "xnnpack": False}


def test_force_fp16_without_vulkan_is_422_and_stores_nothing(
    client: TestClient, admin: dict[str, str]
) -> None:
    before = client.get("/api/sweeps").json()
    body = {"policies": ["act"], "backends": ["xnnpack"], "options": {"force_fp16": True}}
    response = client.post("/api/sweeps", json=body, headers=admin)
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "options", "force_fp16"] and "backends need vulkan" in error["msg"]
    assert client.get("/api/sweeps").json() == before


def test_a_workaround_is_recorded_in_the_cells_of_its_backend_only(
    client: TestClient, admin: dict[str, str]
) -> None:
    options = {"workarounds": ["group_norm_4d"]}
    body = {"policies": ["act"], "backends": ["vulkan", "xnnpack"], "options": options}
    response = client.post("/api/sweeps", json=body, headers=admin)
    assert response.status_code == 201, response.text
    sweep = response.json()
    assert sweep["options"]["workarounds"] == ["group_norm_4d"]
    recorded = {c["backend"]: c["options"]["workarounds"] for c in sweep["cells"]}
    assert recorded == {"vulkan": ["group_norm_4d"], "xnnpack": []}
    summary = client.get(f"/api/sweeps/{sweep['id']}/summary").json()
    assert summary["options"]["workarounds"] == ["group_norm_4d"]
    page = client.get(f"/cells/{sweep['cells'][0]['id']}").text
    assert "Workaround</b> group_norm_4d: each 3-D (N, C, L) native_group_norm" in page


@pytest.mark.parametrize(
    ("backends", "workarounds", "loc", "words"),
    [
        (["xnnpack"], ["group_norm_4d"], ["body", "options", "workarounds"], "is for vulkan cells"),
        (["vulkan"], ["no_such_rewrite"], ["body", "options", "workarounds"], "unknown workaround"),
        (["vulkan"], ["group_norm_4d", "group_norm_4d"], ["body", "options", "workarounds"], "listed twice"),
    ],
)
def test_a_workaround_no_cell_can_take_is_422_and_stores_nothing(
    client: TestClient,
    admin: dict[str, str],
    backends: list[str],
    workarounds: list[str],
    loc: list[str],
    words: str,
) -> None:
    before = client.get("/api/sweeps").json()
    body = {"policies": ["act"], "backends": backends, "options": {"workarounds": workarounds}}
    response = client.post("/api/sweeps", json=body, headers=admin)
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == loc and words in error["msg"], error
    assert client.get("/api/sweeps").json() == before
