"""Who is judging when no name is given: the server login on a PostgreSQL catalog, else the OS
user. Judgments (`queries.QueryStore`) and attributes (`attributes.set_attributes`) both record
this name, so a judge's marks and notes stay together."""

from __future__ import annotations

import getpass

from sqlalchemy import func, select

from engine.catalog.library import Library


def os_user() -> str:
    """The OS login name ("user" where there is none, as on some sandboxes)."""
    try:
        return getpass.getuser()
    except Exception:  # no login name on some sandboxes
        return "user"


def default_judge(library: Library) -> str:
    """The server login on a PostgreSQL catalog (what the server itself knows the person by),
    else the OS user."""
    catalog = library.catalog
    if catalog.engine.dialect.name == "postgresql":
        with catalog.session() as s:
            login = s.scalar(select(func.current_user()))
        if login:
            return str(login)
    return os_user()
