"""Retrieval-augmented generation logic shared by the Serve deployments and in-process callers."""
