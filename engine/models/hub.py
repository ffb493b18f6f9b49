"""The model hub from here: its address, offline mode, and whether it answers now.

A probe of a few seconds (no probe at all under HF_HUB_OFFLINE) makes "no network" a one-line
`ModelUnavailableError` at once instead of a minute of retries. The loader
(`engine.models.encoders`) and the store's downloads (`engine.models.download`) both ask here,
so neither imports the other for it.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request

from engine.errors import ModelLoadError, one_line
from engine.models.spec import ModelSpec, store_key

DEFAULT_ENDPOINT = "https://huggingface.co"
PROBE_SECONDS = 3.0
HEADERS = {"User-Agent": "quadrat-model-store/1"}


class ModelUnavailableError(ModelLoadError):
    """A model is not on disk and cannot be fetched now (no network, download failed). The
    message is one sentence naming what failed and the way on (`--model demo`,
    `quadrat models import PACK`)."""


def unavailable(spec: str | ModelSpec, reason: str) -> ModelUnavailableError:
    """The one-line error for a model that is neither installed nor downloadable now."""
    if isinstance(spec, ModelSpec):
        spec = store_key(spec)
    return ModelUnavailableError(
        f"could not download {spec}: {reason}; use --model demo, or install it offline with "
        f"'quadrat models import PACK' (a pack made on a connected machine with "
        f"'quadrat models pack {spec} OUT')"
    )


def hub_endpoint() -> str:
    """The model hub's base URL (HF_ENDPOINT, as huggingface_hub reads it)."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline_mode() -> bool:
    """True when the user asked for no network (HF_HUB_OFFLINE, as huggingface_hub reads it)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    hub = sys.modules.get("huggingface_hub.constants")  # set programmatically, once imported
    return bool(getattr(hub, "HF_HUB_OFFLINE", False))


def probe(endpoint: str | None = None, timeout: float = PROBE_SECONDS) -> str | None:
    """Whether `endpoint` answers within `timeout` seconds: None if it does, else the reason.

    Any HTTP answer counts (even an error page). The request runs in a daemon thread so that a
    slow name lookup (not covered by socket timeouts) cannot hold the caller longer.
    """
    if offline_mode():
        return "offline mode (HF_HUB_OFFLINE is set)"
    url = endpoint or hub_endpoint()
    host = urllib.parse.urlsplit(url).netloc or url
    outcome: list[str | None] = []

    def attempt() -> None:
        try:
            request = urllib.request.Request(url, method="HEAD", headers=HEADERS)
            with urllib.request.urlopen(request, timeout=timeout):
                pass
            outcome.append(None)
        except urllib.error.HTTPError:
            outcome.append(None)  # it answered
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            outcome.append(f"{host} cannot be reached ({one_line(reason)})")

    thread = threading.Thread(target=attempt, name="quadrat-probe", daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    if not outcome:
        return f"{host} did not answer within {timeout:.0f} s (no network?)"
    return outcome[0]


def ensure_reachable(spec: str | ModelSpec, endpoint: str | None = None) -> None:
    """Raise `ModelUnavailableError` within seconds when `spec` cannot be downloaded now."""
    reason = probe(endpoint)
    if reason is not None:
        raise unavailable(spec, reason)


def sha256_of_etag(value: object) -> str | None:
    """The sha256 an ETag holds (quoted or weak syntax), or None when it holds none (the git
    blob id of a small file, an md5): the hub's X-Linked-Etag, or huggingface_hub's record of it."""
    text = str(value or "").strip().removeprefix("W/").strip('"').lower()
    return text if re.fullmatch(r"[0-9a-f]{64}", text) else None
