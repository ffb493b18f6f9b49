"""Qt widgets, views, models and delegates. No business logic: controllers in app/ decide."""

from app.workers import keep_none_alive

keep_none_alive()
