"""Retrieval quality evaluation on BEIR-format datasets (nDCG@k, recall@k)."""
