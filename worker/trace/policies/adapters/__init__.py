"""Policy adapters, one module per LeRobot policy type (openpi serves pi0 and pi05). Importing the package
imports none of them: ``worker.trace.policies.registry.ADAPTER_MODULES`` names each policy's module,
imported on first use."""
