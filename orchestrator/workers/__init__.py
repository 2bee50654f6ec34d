"""CPU workers: registration, heartbeats, the online/offline state and their view."""
