"""Sweeps and their cells: submit, list, show, cancel."""
