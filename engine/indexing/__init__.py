"""Indexing: walking folders, reading metadata, decoding, the indexer, thumbnails, collections."""
