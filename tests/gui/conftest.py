"""Fixtures for the window tests: a real Application on a throwaway library, the demo model,
and a teardown that fails the test if a worker thread is left running."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.settings import Settings


@pytest.fixture
def make_app(qtbot, demo_encoder, tmp_path: Path) -> Iterator[Callable[..., object]]:
    """Builds, shows and starts an `Application` searching with the demo model."""
    from app.controllers.application import Application

    made: list[Application] = []

    def make(
        settings: Settings | None = None,
        start: bool = True,
        encoder: object = None,
        **kwargs: object,
    ) -> Application:
        settings = settings or Settings(
            model="demo", library_dir=str(tmp_path / "library"), batch_size=16
        )
        chosen = encoder or demo_encoder
        app = Application(
            settings=settings,
            log_file=tmp_path / "quadrat.log",
            encoder_loader=kwargs.pop("encoder_loader", None) or (lambda spec, device: chosen),
            **kwargs,
        )
        qtbot.addWidget(app.window)
        app.show()
        if start:
            app.start()
        made.append(app)
        return app

    yield make
    for app in made:
        app.shutdown(timeout_s=30)
        assert app.runner.idle(), "a worker thread was left running after the test"


class SlowEncoder:
    """The demo encoder, slowed down per batch so a test can act in the middle of a run."""

    def __init__(self, inner: object, seconds_per_batch: float = 0.15) -> None:
        self.inner = inner
        self.seconds = seconds_per_batch
        for name in ("model_key", "spec", "dim", "device"):
            setattr(self, name, getattr(inner, name))

    def preprocess(self, image):  # noqa: ANN001, ANN201
        return self.inner.preprocess(image)

    def encode_preprocessed(self, batch):  # noqa: ANN001, ANN201
        import time

        time.sleep(self.seconds)
        return self.inner.encode_preprocessed(batch)

    def encode_images(self, images):  # noqa: ANN001, ANN201
        return self.inner.encode_images(images)

    def encode_texts(self, texts):  # noqa: ANN001, ANN201
        return self.inner.encode_texts(texts)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The offscreen platform plugin warns that it cannot propagate size hints (dock widgets ask
    # for it); that says nothing about the application, so only it is ignored.
    for item in items:
        if "tests/gui" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.qt_log_ignore("does not support propagateSizeHints"))
