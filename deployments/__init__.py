"""The Ray Serve graph (retriever → reranker → generator behind a FastAPI ingress) and its Serve configs.

Empty in this slice: the serving graph is its own issue and builds on the index versions `app.index` publishes."""
