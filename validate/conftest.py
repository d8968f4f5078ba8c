"""Loads tether's pytest plugin: markers, hardware skips and per-GPU pinning live there."""

pytest_plugins = ["tether.pytest_plugin"]
