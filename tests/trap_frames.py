"""Camera-trap frames the tests draw: a textured scene that stays put over a burst, an animal
(a striped body with a head) that moves through it, a frame the wind triggered with nothing
in it, and one smeared by motion; saved as JPEGs with the EXIF a trail camera writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import ExifTags, Image, ImageDraw, ImageFilter

SIZE = (240, 180)


def scene(seed: int) -> Image.Image:
    """Grass and a sky: a gradient with fine texture (what every frame of a burst shares)."""
    rng = np.random.default_rng(seed)
    height, width = SIZE[1], SIZE[0]
    rows = np.linspace(0.0, 1.0, height)[:, None]
    base = np.empty((height, width, 3), dtype=np.float32)
    base[..., 0] = 90 + 60 * rows
    base[..., 1] = 120 + 70 * rows
    base[..., 2] = 150 - 60 * rows
    texture = rng.normal(0.0, 14.0, size=(height // 3, width // 3))
    base += np.kron(texture, np.ones((3, 3)))[:height, :width, None]
    return Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))


def frame(
    background: Image.Image, seed: int, animal_at: int | None, blur: float = 0.0
) -> Image.Image:
    """The scene with a little sensor noise, and the animal at x = `animal_at` (None: an empty
    frame), smeared by `blur` pixels of motion when given."""
    rng = np.random.default_rng(seed)
    pixels = np.asarray(background, dtype=np.float32) + rng.normal(0.0, 2.0, (SIZE[1], SIZE[0], 3))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    if animal_at is not None:
        draw = ImageDraw.Draw(image)
        x, y = animal_at, 110
        draw.ellipse((x - 40, y - 22, x + 40, y + 22), fill=(70, 45, 25))
        for stripe in range(x - 34, x + 34, 9):  # a striped coat: edges the eye (and the face) sees
            draw.line((stripe, y - 18, stripe + 4, y + 18), fill=(210, 190, 150), width=3)
        draw.ellipse((x + 32, y - 34, x + 56, y - 10), fill=(60, 40, 20))
        for leg in (x - 28, x - 12, x + 12, x + 28):
            draw.line((leg, y + 18, leg, y + 44), fill=(50, 35, 20), width=5)
    if blur:
        image = image.filter(ImageFilter.GaussianBlur(blur))
    return image


def save_frame(
    image: Image.Image,
    path: Path,
    moment: str,
    serial: str,
    make: str = "TrailCo",
    model: str = "TC-9",
) -> Path:
    """`image` as a JPEG with the capture time, make, model and serial in its EXIF."""
    exif = Image.Exif()
    exif[ExifTags.Base.Make] = make
    exif[ExifTags.Base.Model] = model
    sub = exif.get_ifd(ExifTags.IFD.Exif)
    sub[ExifTags.Base.DateTimeOriginal] = moment
    sub[ExifTags.Base.BodySerialNumber] = serial
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, "JPEG", quality=92, exif=exif)
    return path


def burst(seed: int) -> list[tuple[str, Image.Image]]:
    """(what, frame) of one burst: the wind's empty frame first, three sharp frames of the
    animal walking through, and a last one smeared by its running."""
    background = scene(seed)
    return [
        ("empty", frame(background, seed + 1, None)),
        ("animal", frame(background, seed + 2, 70)),
        ("animal", frame(background, seed + 3, 120)),
        ("animal", frame(background, seed + 4, 165)),
        ("blurred", frame(background, seed + 5, 190, blur=4.0)),
    ]
