"""The tracker's metrics over edge-dialect graphs: ops, heavy-math multiply-adds, connected groups."""
