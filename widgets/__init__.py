"""Qt widgets, views, models and delegates. No business logic: controllers in app/ decide.

Widgets import Qt, the standard library and each other only: never `app` or `engine`. They
show plain data they are given and emit signals saying what the user asked for.
"""

from widgets.qtcompat import keep_none_alive

keep_none_alive()
