"""Policy adapters: build a LeRobot policy offline and trace its programs for one action chunk."""
