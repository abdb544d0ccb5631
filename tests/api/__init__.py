"""Tests of the service: the Flask routes, the CLI, the SDK, the catalog, jobs, limits and access control."""
