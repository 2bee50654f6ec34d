"""The tracker report of a sweep (Markdown)."""
