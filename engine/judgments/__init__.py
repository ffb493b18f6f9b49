"""Judgments: the query store, live metrics and learning from judgments."""
