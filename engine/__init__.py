"""Quadrat's core: catalog, indexing, search methods, metrics. Never imports Qt."""


def quadrat_version() -> str:
    """The installed Quadrat version (recorded with every run so that it can be repeated)."""
    from importlib import metadata

    try:
        return metadata.version("quadrat")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"
