"""Vectors: the FAISS index, its memory policy and the checksummed vector file."""
