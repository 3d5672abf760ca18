"""Locust load tests for a running Ragline endpoint."""
