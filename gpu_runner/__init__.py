"""Device runners: run bundles with the ExecuTorch runtime on device hosts (never imports torch)."""
