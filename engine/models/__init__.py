"""Models: the model spec, CLIP encoders, the model store and the LLM client."""
