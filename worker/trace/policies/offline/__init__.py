"""Offline stand-ins for what LeRobot's VLA constructors fetch from the Hugging Face hub.

Each module holds the published architecture config of one backbone checkpoint as data (the sizes of
its ``config.json``), and ``hub`` redirects a policy module's ``from_pretrained`` lookups to them while
the policy is built. ``tokens`` makes tokenizer-shaped ids: coverage depends on shapes, not words.
"""
