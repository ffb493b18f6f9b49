"""Write an offline model pack of a tiny open_clip model, with no network: the packaging test
imports it into the frozen app and searches with it.

    python tools/make_model_pack.py OUT.qmodel

The model (random weights, a 32-wide ViT) is served from a local stand-in for the model hub
and packed by the model store's own `pack`, so the pack is exactly what `quadrat models pack`
writes for a downloaded model. Its spec is `hf-hub:quadrat/tiny-clip`.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import sys
import tempfile
import threading
from pathlib import Path

HUB_ID = "quadrat/tiny-clip"
SPEC = f"hf-hub:{HUB_ID}"
ARCH = "quadrat-pack-tiny-vit"
CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 8},
    "text_cfg": {"context_length": 12, "vocab_size": 49408, "width": 16, "heads": 2, "layers": 1},
}


def write_hub_folder(root: Path) -> None:
    """The model's config and safetensors weights where a hub serves them."""
    import open_clip
    import torch
    from safetensors.torch import save_file

    from engine.models.folders import CONFIG_NAME, WEIGHTS_NAME

    arch_file = root / f"{ARCH}.json"
    arch_file.write_text(json.dumps(CONFIG))
    open_clip.add_model_config(arch_file)
    torch.manual_seed(7)
    model = open_clip.create_model(ARCH).eval()
    folder = root / HUB_ID / "resolve" / "main"
    folder.mkdir(parents=True)
    (folder / CONFIG_NAME).write_text(json.dumps({"model_cfg": CONFIG, "preprocess_cfg": {}}))
    weights = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(weights, str(folder / WEIGHTS_NAME))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
        pass


def make_pack(out: Path) -> Path:
    """Build, serve and pack the tiny model; returns the pack's path."""
    from engine.models.store import ModelStore

    with tempfile.TemporaryDirectory(prefix="quadrat-pack-") as temp:
        hub_root = Path(temp) / "hub"
        hub_root.mkdir()
        write_hub_folder(hub_root)
        handler = functools.partial(_QuietHandler, directory=str(hub_root))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            endpoint = f"http://127.0.0.1:{server.server_address[1]}"
            store = ModelStore(Path(temp) / "store", endpoint=endpoint)
            return store.pack(SPEC, out)
        finally:
            server.shutdown()
            server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the pack file to write (or a folder for it)")
    args = parser.parse_args(argv)
    print(f"{make_pack(args.out)} ({SPEC})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
