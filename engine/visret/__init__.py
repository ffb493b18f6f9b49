"""Visualize-then-retrieve: draw the query, then search the collection with the drawings.

`generator` holds the generator protocol, the drawing cache and `draw_all`; `diffusers_backend`
the Stable Diffusion generator (imported only when a diffusers spec is loaded); `prompt` the
prompt templates and the optional LLM rewriting; `painter` the procedural demo painter.
"""

from engine.visret.generator import (
    Drawing,
    DrawingCache,
    DrawSettings,
    Generator,
    draw_all,
    load_generator,
)

__all__ = ["DrawSettings", "Drawing", "DrawingCache", "Generator", "draw_all", "load_generator"]
