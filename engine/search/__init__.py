"""Search: the vector searcher, filters and full-text search over records."""
