"""The torch-free catalog of names agrees with LeRobot's policy registry and the engine's."""

from __future__ import annotations

import lerobot.policies  # noqa: F401  (registers every policy config LeRobot ships)
from lerobot.configs.policies import PreTrainedConfig

from coverfarm import catalog
from coverfarm.offline_causes import NO_OFFLINE_BUILD
from worker.lower.backends import all_backends
from worker.trace.policies.registry import supported


def test_the_catalog_holds_the_trackers_25_policies() -> None:
    assert len(catalog.POLICIES) == 25
    assert list(catalog.POLICIES) == sorted(catalog.POLICIES)
    assert set(catalog.IN_LEROBOT).isdisjoint(catalog.NOT_IN_LEROBOT)


def test_in_lerobot_is_exactly_what_the_installed_lerobot_ships() -> None:
    assert set(catalog.IN_LEROBOT) == set(PreTrainedConfig.get_known_choices())


def test_every_adapter_is_for_a_policy_of_the_installed_lerobot() -> None:
    assert set(supported()) <= set(catalog.IN_LEROBOT)
    assert list(catalog.BACKENDS) == sorted(all_backends())


def test_only_the_six_missing_policies_are_unavailable() -> None:
    unavailable = {name for name in catalog.POLICIES if catalog.unavailable_reason(name)}
    assert unavailable == set(catalog.NOT_IN_LEROBOT)
    assert catalog.unavailable_reason("dm05") == "policy not available in lerobot 0.6.1"
    assert catalog.check_policy("dm05") is None
    assert catalog.check_policy("nope") is not None


def test_every_lerobot_policy_has_an_adapter_or_a_precise_cause() -> None:
    adapted = set(supported())
    assert adapted.isdisjoint(NO_OFFLINE_BUILD), "an adapter replaces its policy's cause"
    assert adapted | set(NO_OFFLINE_BUILD) == set(catalog.IN_LEROBOT)


def test_each_policy_is_registered_by_the_module_the_registry_names() -> None:
    import functools
    import importlib
    import pkgutil

    import worker.trace.policies.adapters as package
    from worker.trace.policies import registry

    modules = {
        found.name for found in pkgutil.iter_modules(package.__path__) if not found.name.startswith("_")
    }
    assert modules == set(registry.ADAPTER_MODULES.values()), "every adapter module is in the table"
    for module in modules:
        importlib.import_module(f"{package.__name__}.{module}")
    assert set(registry._ADAPTERS) == set(registry.ADAPTER_MODULES)
    for name, module in registry.ADAPTER_MODULES.items():
        adapter = registry.get_adapter(name)
        # a family's adapters are one function bound to each name (openpi's pi0 and pi05)
        traced_by = adapter.func if isinstance(adapter, functools.partial) else adapter
        assert traced_by.__module__ == f"worker.trace.policies.adapters.{module}", name


def test_listing_the_adapters_imports_none_and_getting_one_imports_only_it() -> None:
    import subprocess
    import sys

    code = """
import sys
from worker.trace.policies.registry import get_adapter, supported

def adapters():
    prefixes = ("worker.trace.policies.adapters.", "lerobot")
    return sorted(m for m in sys.modules if m.startswith(prefixes) and "._" not in m)

supported()
print(adapters())
get_adapter("act")
print([m for m in adapters() if m.startswith("worker.")])
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert result.stdout.splitlines()[:2] == ["[]", "['worker.trace.policies.adapters.act']"]


def test_every_backend_module_has_its_lowering_module_of_the_same_name() -> None:
    from coverfarm import backends

    lowering = all_backends()
    for name, info in backends.registry().items():
        assert lowering[name].name == info.name == name
