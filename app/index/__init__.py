"""Index versions (FAISS + BM25) built from dataset versions, and search over them."""
