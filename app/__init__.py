"""Ragline: documents to grounded answers and fine-tuned models on Ray."""

__version__ = "0.1.0"
