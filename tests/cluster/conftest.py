"""Fixtures for the cluster tests.

`cluster`, `api_client` and `namespace` are defined in tests/clusterfixtures.py
and re-exported once, by the suite root's tests/conftest.py: re-exporting them
here too would give this directory its own session-scoped cluster fixture.
"""
