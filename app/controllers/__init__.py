"""Controllers: they decide what happens when the user acts, and run the engine's work in
the background. Widgets lay out; controllers decide; the engine computes."""
