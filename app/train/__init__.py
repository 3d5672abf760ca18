"""Fine-tuning jobs on Ray Train: SFT of causal LMs and the cross-encoder reranker."""
