"""The streaming ingestion pipeline: read → normalise → exact dedup → near dedup → chunk → embed → parquet."""
