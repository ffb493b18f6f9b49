"""Visualize-then-retrieve resources: the default prompt templates (prompts.json)."""
