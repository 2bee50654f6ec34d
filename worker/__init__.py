"""CPU worker: traces LeRobot policies and lowers them with ExecuTorch partitioners (imports torch)."""
