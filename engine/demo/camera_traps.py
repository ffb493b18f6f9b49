"""A synthetic camera-trap collection: a few deployments of bursts, with the truth written down.

Six cameras, each a folder of JPEGs whose EXIF holds what a trail camera writes: the capture
time (DateTimeOriginal with OffsetTimeOriginal), GPS, Make, Model and BodySerialNumber. Each
camera fires bursts of 3 to 10 frames a second or two apart, an hour or more between bursts:
animals (drawn simply: a body, a head and legs), empty frames (grass moved by the wind) and night
frames (dark and grey, the animal lit by the infrared flash). One burst straddles midnight.
Every third burst by day shows its animal far off, by the horizon: a few percent of the frame,
where whole-frame search struggles (at night the flash lights only near animals).

Beside the truth, the generator writes `detections.json`: what a detector would have found,
in MegaDetector's batch-output format (1.4), from the boxes it drew. Near animals get a high
confidence, far ones a lower one (far ones at night the lowest: some fall below the usual
0.2 threshold), and a few empty frames get a false box on the grass at a low confidence, so
the threshold matters.

The demo model knows colours and shapes only (`engine.demo.scenes`), so each species is drawn
in one of its colours with a round body, and its query names that colour and shape beside the
species. `queries.csv` and `judgments.csv` are in the INQUIRE format of the iNat-style demo
(`engine.demo.collection`); a photo is relevant to a query when the generator drew that species
in it (and at night, for the night query), so every metric, per photo or per event, is exact.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
from PIL import ExifTags, Image, ImageDraw, ImageFilter

from engine.demo.collection import JUDGMENTS_HEADER, QUERIES_HEADER
from engine.errors import BadInputError

FRAME_SIZE = (240, 180)
_MARKER = "camera_traps.json"  # what the generator drew: the truth for tests and benchmarks
DETECTIONS_FILE = "detections.json"  # MegaDetector batch output of what was drawn
DETECTOR_NAME = "quadrat-demo-detector"
FAR_EVERY = 3  # every third burst of a camera (the third, sixth, ...) shows its animal far off
_FAR_SCALE = (0.40, 0.55)  # a far animal's size against a near one's: 2-5 % of the frame
_DETECTION_STREAM = 1  # seed key of the detector's randomness, apart from the drawing's


@dataclass(frozen=True)
class Camera:
    """One deployment: a folder, a camera and a place."""

    folder: str
    serial: str
    latitude: float
    longitude: float
    utc_offset: str  # what the camera writes in OffsetTimeOriginal
    make: str = "QuadratTrail"
    model: str = "QT-1"
    scenery: str = ""  # "stream" or "shrubs": patches in the animals' colours in every frame


@dataclass(frozen=True)
class Species:
    """An animal as the demo draws it, and the colour and shape the demo model sees."""

    scientific_name: str
    common_name: str
    colour: str  # a colour word of `engine.demo.scenes.COLOURS`
    rgb: tuple[int, int, int]


CAMERAS: tuple[Camera, ...] = (
    Camera("CAM01_trail", "QT0001", 52.2210, 5.9120, "+02:00"),
    Camera("CAM02_stream", "QT0002", 52.2304, 5.9391, "+02:00", scenery="stream"),
    Camera("CAM03_ridge", "QT0003", 52.2452, 5.9015, "+02:00", scenery="shrubs"),
    Camera("CAM04_meadow", "QT0004", 52.2387, 5.9262, "+02:00"),
    Camera("CAM05_pond", "QT0005", 52.2279, 5.9488, "+02:00", scenery="stream"),
    Camera("CAM06_edge", "QT0006", 52.2516, 5.9197, "+02:00", scenery="shrubs"),
)
SPECIES: tuple[Species, ...] = (
    Species("Capreolus capreolus", "roe deer", "red", (200, 40, 30)),
    Species("Vulpes vulpes", "red fox", "yellow", (230, 200, 40)),
    Species("Sus scrofa", "wild boar", "blue", (40, 60, 200)),
)


@dataclass(frozen=True)
class DrawnEvent:
    """A burst as drawn: its camera, its frames (paths under the root), what it shows."""

    camera: str
    frames: tuple[str, ...]
    start: datetime  # the camera's local time of the first frame
    species: str | None  # scientific name; None for an empty burst (wind, grass)
    night: bool
    far: bool = False  # the animal walks by the horizon: a small box
    # Each frame's drawn animal as a normalised (x, y, width, height), origin top left; None
    # for a frame with no animal. Empty for an event read from an older truth file.
    boxes: tuple[tuple[float, float, float, float] | None, ...] = ()


@dataclass(frozen=True)
class DemoQuery:
    """A query of the demo and how a burst answers it."""

    query_id: int
    text: str
    species: str
    night_only: bool = False

    def answers(self, event: DrawnEvent) -> bool:
        """Whether every frame of `event` is relevant to this query."""
        return event.species == self.species and (event.night or not self.night_only)


QUERIES: tuple[DemoQuery, ...] = (
    *(
        DemoQuery(i + 1, f"a {s.colour} circle: {s.common_name}", s.scientific_name)
        for i, s in enumerate(SPECIES)
    ),
    DemoQuery(
        len(SPECIES) + 1,
        f"a {SPECIES[0].colour} circle at night: {SPECIES[0].common_name} at night",
        SPECIES[0].scientific_name,
        night_only=True,
    ),
)


@dataclass
class CameraTrapDemo:
    """A written camera-trap demo: where its files are and what was drawn."""

    root: Path
    queries_path: Path
    judgments_path: Path
    events: list[DrawnEvent] = field(default_factory=list)
    queries: tuple[DemoQuery, ...] = QUERIES

    @property
    def image_count(self) -> int:
        """Frames written."""
        return sum(len(e.frames) for e in self.events)

    def relevant(self, query: DemoQuery) -> list[str]:
        """The frames (paths under the root) relevant to `query`."""
        return [f for e in self.events if query.answers(e) for f in e.frames]

    @property
    def detections_path(self) -> Path:
        """The MegaDetector-format file of what was drawn."""
        return self.root / DETECTIONS_FILE


def _exif(camera: Camera, moment: datetime) -> Image.Exif:
    exif = Image.Exif()
    exif[ExifTags.Base.Make] = camera.make
    exif[ExifTags.Base.Model] = camera.model
    sub = exif.get_ifd(ExifTags.IFD.Exif)
    sub[ExifTags.Base.DateTimeOriginal] = moment.strftime("%Y:%m:%d %H:%M:%S")
    sub[ExifTags.Base.OffsetTimeOriginal] = camera.utc_offset
    sub[ExifTags.Base.BodySerialNumber] = camera.serial
    exif.get_ifd(ExifTags.IFD.GPSInfo).update(
        {
            ExifTags.GPS.GPSLatitudeRef: "N" if camera.latitude >= 0 else "S",
            ExifTags.GPS.GPSLatitude: (abs(camera.latitude), 0.0, 0.0),
            ExifTags.GPS.GPSLongitudeRef: "E" if camera.longitude >= 0 else "W",
            ExifTags.GPS.GPSLongitude: (abs(camera.longitude), 0.0, 0.0),
        }
    )
    return exif


def _scene(rng: np.random.Generator, night: bool, scenery: str = "") -> Image.Image:
    """A camera's view: ground and grass blades, which the wind moves from frame to frame, and
    what the camera looks at besides (`Camera.scenery`)."""
    width, height = FRAME_SIZE
    sky, ground = ((70, 90, 70), (90, 110, 60)) if not night else ((20, 20, 20), (35, 35, 35))
    image = Image.new("RGB", FRAME_SIZE, sky)
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, height // 2, width, height), fill=ground)
    _draw_scenery(draw, rng, scenery, night)
    for _ in range(40):
        x = int(rng.integers(0, width))
        lean = int(rng.integers(-6, 7))
        shade = int(rng.integers(40, 90)) if night else int(rng.integers(100, 160))
        colour = (shade, shade, shade) if night else (60, shade, 40)
        draw.line((x, height, x + lean, height - int(rng.integers(20, 60))), fill=colour, width=2)
    return image


def _draw_scenery(
    draw: ImageDraw.ImageDraw, rng: np.random.Generator, scenery: str, night: bool
) -> None:
    """A stream across the foreground, or autumn shrubs at the frame's sides: large patches in
    the animals' colours (blue water; red and yellow leaves), as real deployments have, which
    a whole-frame search sees as much as a far animal. Grey at night (infrared)."""
    width, height = FRAME_SIZE

    def tone(rgb: tuple[int, int, int]) -> tuple[int, int, int]:
        grey = int(sum(rgb) / 3) + 10
        return (grey, grey, grey) if night else rgb

    if scenery == "stream":
        top = int(height * 0.78) + int(rng.integers(-2, 3))
        draw.polygon(
            [(0, top), (width, top - 8), (width, top + 14), (0, top + 24)],
            fill=tone((50, 80, 185)),
        )
    elif scenery == "shrubs":
        for x, rgb in ((0, (185, 50, 35)), (width, (220, 185, 45)), (width // 2, (185, 50, 35))):
            wide, tall = int(rng.integers(36, 46)), int(rng.integers(20, 28))
            y = height - tall // 2 - 4
            draw.ellipse((x - wide, y - tall, x + wide, y + tall), fill=tone(rgb))


def _draw_animal(
    image: Image.Image,
    rng: np.random.Generator,
    species: Species,
    step: int,
    night: bool,
    far: tuple[float, int] | None = None,
) -> tuple[float, float, float, float]:
    """A body (the round shape the demo model knows), a head and legs, walking across; near
    by default, or `far` = (scale, start x): smaller, by the horizon. Returns the animal's box,
    normalised (x, y, width, height), origin top left."""
    draw = ImageDraw.Draw(image)
    width, height = FRAME_SIZE
    radius = int(rng.integers(26, 34))
    if far is None:
        scale = 1.0
        cx = 50 + step * 14 + int(rng.integers(-4, 5))
        cy = height // 2 + 10
    else:
        scale, start = far
        radius = max(4, round(radius * scale))
        cx = start + step * 6 + int(rng.integers(-2, 3))
        cy = height // 2 - 2
    colour = species.rgb
    if night:  # infrared: grey, brighter than the night around it
        grey = int(sum(colour) / 3) + 90
        colour = (grey, grey, grey)
    legs = max(4, round(12 * scale))
    for dx in (-radius // 2, radius // 2):
        draw.line(
            (cx + dx, cy, cx + dx, cy + radius + legs), fill=colour, width=max(1, round(4 * scale))
        )
    draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=colour)
    head = max(3, round(9 * scale))
    hx = min(width - 10, cx + radius + max(2, round(6 * scale)))
    top = cy - radius - max(1, round(4 * scale))
    draw.ellipse((hx - head, top, hx + head, top + 2 * head), fill=colour)
    left, right = max(0, cx - radius), min(width, max(cx + radius, hx + head) + 1)
    upper, lower = max(0, min(top, cy - radius)), min(height, cy + radius + legs + 1)
    return (left / width, upper / height, (right - left) / width, (lower - upper) / height)


def write_camera_trap_demo(
    dest: Path, seed: int = 7, bursts_per_camera: int = 12
) -> CameraTrapDemo:
    """Write the camera-trap demo to `dest` (which must be missing or empty, or hold this demo:
    then it is written again). Returns what was drawn."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()) and not (dest / _MARKER).is_file():
        raise BadInputError(f"{dest} is not empty: choose a new folder for the demo")
    dest.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    demo = CameraTrapDemo(dest, dest / "queries.csv", dest / "judgments.csv")
    for index, camera in enumerate(CAMERAS):
        moment = datetime(2024, 5, 1, 18, 0, 0) + timedelta(minutes=17 * index)
        written = 0  # the camera's frames so far: its file numbers go on from there
        for burst in range(bursts_per_camera):
            if index == 0 and burst == 4:
                # A burst that straddles midnight: one event over two dates.
                moment = moment.replace(hour=23, minute=59, second=57) + timedelta(days=1)
            else:
                moment += timedelta(minutes=int(rng.integers(40, 240)))
            night = moment.hour >= 22 or moment.hour < 5
            # Each camera sees each species; the rest are empty bursts (wind in the grass).
            kind = (burst + index) % (len(SPECIES) + 1)
            species = SPECIES[kind] if kind < len(SPECIES) else None
            # The infrared flash lights a few metres only: a night burst's animal is near.
            far = burst % FAR_EVERY == FAR_EVERY - 1 and not night
            event = _write_burst(dest, rng, camera, written, moment, species, night, far)
            demo.events.append(event)
            written += len(event.frames)
            moment += timedelta(seconds=2 * len(event.frames))
    _write_truth(demo)
    write_detections(demo, np.random.default_rng([seed, _DETECTION_STREAM]))
    return demo


def _write_burst(
    dest: Path,
    rng: np.random.Generator,
    camera: Camera,
    written: int,
    start: datetime,
    species: Species | None,
    night: bool,
    far: bool = False,
) -> DrawnEvent:
    """One burst of 3 to 10 frames, numbered on from the camera's `written` frames; `far`: the
    animal walks by the horizon."""
    frames: list[str] = []
    boxes: list[tuple[float, float, float, float] | None] = []
    count = int(rng.integers(3, 11))
    (dest / camera.folder).mkdir(exist_ok=True)
    lane = (float(rng.uniform(*_FAR_SCALE)), int(rng.integers(20, 150))) if far else None
    moment = start
    for step in range(count):
        if step:
            moment += timedelta(seconds=int(rng.integers(1, 3)))  # the trigger's 1-2 s
        image = _scene(rng, night, camera.scenery)
        box = None
        if species is not None:
            box = _draw_animal(image, rng, species, step, night, lane)
        boxes.append(box)
        if night:
            image = image.filter(ImageFilter.GaussianBlur(1))  # the flash's soft light
        name = f"{camera.folder}/IMG_{written + step + 1:04d}.JPG"
        image.save(dest / name, "JPEG", quality=85, exif=_exif(camera, moment))
        frames.append(name)
    return DrawnEvent(
        camera.folder,
        tuple(frames),
        start,
        species.scientific_name if species else None,
        night,
        far and species is not None,
        tuple(boxes),
    )


def _write_truth(demo: CameraTrapDemo) -> None:
    with demo.queries_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(QUERIES_HEADER.split(","))
        for index, query in enumerate(QUERIES):
            supercategory = "Night" if query.night_only else "Species"
            writer.writerow(
                [index, query.query_id, query.text, supercategory, query.species, "Animalia"]
            )
    with demo.judgments_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(JUDGMENTS_HEADER.split(","))
        for query in QUERIES:
            for path in demo.relevant(query):
                writer.writerow([query.query_id, "", path])
    truth = [
        {
            "camera": e.camera,
            "frames": list(e.frames),
            "start": e.start.isoformat(),
            "species": e.species,
            "night": e.night,
            "far": e.far,
            "boxes": [list(b) if b else None for b in e.boxes],
        }
        for e in demo.events
    ]
    (demo.root / _MARKER).write_text(json.dumps({"events": truth}, indent=1) + "\n")


def _confidence(rng: np.random.Generator, event: DrawnEvent) -> float:
    """A detector's confidence in a drawn animal: high near, lower far, lowest far at night."""
    low, high = (0.35, 0.75) if event.far else (0.80, 0.97)
    if event.night:
        low, high = (0.12, 0.55) if event.far else (0.65, 0.92)
    return round(float(rng.uniform(low, high)), 3)


def _false_box(rng: np.random.Generator) -> list[float]:
    """A box on the grass where nothing was drawn (a tuft the wind moved)."""
    w, h = float(rng.uniform(0.06, 0.15)), float(rng.uniform(0.06, 0.15))
    x, y = float(rng.uniform(0, 1 - w)), float(rng.uniform(0.5, 1 - h))
    return [round(v, 4) for v in (x, y, w, h)]


def write_detections(demo: CameraTrapDemo, rng: np.random.Generator) -> Path:
    """Write `detections.json` beside the truth: MegaDetector batch output (format 1.4) of the
    drawn animals (category "1", animal) with a detector's confidence, and a few false boxes
    of low confidence on empty frames. Returns the file's path."""
    images: list[dict[str, object]] = []
    for event in demo.events:
        boxes = event.boxes or (None,) * len(event.frames)
        for frame, box in zip(event.frames, boxes, strict=True):
            found: list[dict[str, object]] = []
            if box is not None:
                bbox = [round(v, 4) for v in box]
                found.append({"category": "1", "conf": _confidence(rng, event), "bbox": bbox})
            elif rng.uniform() < 0.3:
                conf = round(float(rng.uniform(0.05, 0.3)), 3)
                found.append({"category": "1", "conf": conf, "bbox": _false_box(rng)})
            images.append({"file": frame, "detections": found})
    batch = {
        "info": {
            "detector": DETECTOR_NAME,
            "detection_completion_time": "2024-06-01 12:00:00",
            "format_version": "1.4",
        },
        "detection_categories": {"1": "animal", "2": "person", "3": "vehicle"},
        "images": images,
    }
    demo.detections_path.write_text(json.dumps(batch, indent=1) + "\n", encoding="utf-8")
    return demo.detections_path
