"""Visualize-then-retrieve: draw the query, then search the collection with the drawings.

`base` holds what every generator shares (`DrawSettings`, `Drawing`, the `Generator` protocol);
`generator` the drawing cache, `load_generator` and `draw_all`; `diffusers_backend`
the Stable Diffusion generator (imported only when a diffusers spec is loaded); `prompt` the
prompt templates and the optional LLM rewriting; `painter` the procedural demo painter.
"""

from engine.visret.base import Drawing, DrawSettings, Generator
from engine.visret.generator import DrawingCache, draw_all, load_generator

__all__ = ["DrawSettings", "Drawing", "DrawingCache", "Generator", "draw_all", "load_generator"]
