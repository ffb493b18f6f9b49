"""Qt compatibility guards, applied before the first widget or task exists.

Lives at the bottom of the Qt layers (it imports nothing of ours), so `widgets/__init__.py`
applies it for every widget and `app.main` applies it before the application object exists;
no module has to import upwards to get it.
"""

from __future__ import annotations

import sys

# What `keep_none_alive` adds to None's reference count (on Python < 3.12).
NONE_RESERVE = 1 << 48


def keep_none_alive() -> None:
    """Work around PySide6 wheels built for Python >= 3.12 running on 3.11.

    There, None is immortal, so the wheels' void methods return it without adding a
    reference. On 3.11 every such call (painter.save(), setPen(), ...) drops one reference to
    None, and after a few thousand calls Python aborts with "deallocating None". Giving None a
    reference count no program can use up restores 3.12's behaviour. No-op on 3.12 and later.
    """
    if none_guarded():
        return
    import ctypes

    # ob_refcnt is the first field of every CPython object, at the object's address.
    ctypes.c_ssize_t.from_address(id(None)).value += NONE_RESERVE
    keep_none_alive.done = True  # type: ignore[attr-defined]


def none_guarded() -> bool:
    """True when None cannot run out of references: Python >= 3.12, or the guard applied."""
    return sys.version_info >= (3, 12) or getattr(keep_none_alive, "done", False)
