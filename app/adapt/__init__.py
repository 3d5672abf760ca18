"""Adaptation to a corpus with no labels (`ragline adapt`): a question writer (vLLM on Ray Data) asks questions of
sampled chunks, a round trip through the current retriever keeps the answerable ones, the trained roles learn from
them, and a paired bootstrap on held-out questions decides what is promoted."""
