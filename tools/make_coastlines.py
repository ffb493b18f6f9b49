"""Make the map's coastline file from Natural Earth's 1:110m land, as world-atlas ships it.

    npm pack world-atlas@2.0.2 && tar xzf world-atlas-2.0.2.tgz
    python tools/make_coastlines.py package/land-110m.json

world-atlas's `land-110m.json` is TopoJSON: the land is a MultiPolygon whose rings are lists of
shared arcs, and each arc is quantised (integers on a grid, mapped to degrees by the file's
`transform`) and delta-encoded (every position after the first is the difference from the one
before). This decodes the arcs, joins them into closed rings, rounds every position to 0.01°
and writes `resources/map/land-110m.json`: one list of rings, each ring a flat list of
longitude, latitude pairs in hundredths of a degree (integers), so the window reads it with
`json` alone. Holes (lakes) are rings too; the map fills the rings even-odd. A ring cut at the
antimeridian runs on past ±180° instead (see `unwrapped`), so the map draws no line across
the world.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "resources" / "map" / "land-110m.json"
SOURCE = "world-atlas 2.0.2 (npm), land-110m.json: Natural Earth 4.1.0 1:110m land"
CENTI = 100  # positions are stored in hundredths of a degree


def decode_arcs(topology: dict[str, Any]) -> list[list[tuple[float, float]]]:
    """Every arc of a quantised, delta-encoded TopoJSON topology as (lon, lat) degrees."""
    transform = topology.get("transform")
    scale_x, scale_y = transform["scale"] if transform else (1.0, 1.0)
    shift_x, shift_y = transform["translate"] if transform else (0.0, 0.0)
    arcs = []
    for arc in topology["arcs"]:
        x = y = 0
        points = []
        for position in arc:
            if transform:  # delta-encoded only when quantised
                x, y = x + position[0], y + position[1]
            else:
                x, y = position[0], position[1]
            points.append((x * scale_x + shift_x, y * scale_y + shift_y))
        arcs.append(points)
    return arcs


def ring_points(
    indices: list[int], arcs: list[list[tuple[float, float]]]
) -> list[tuple[float, float]]:
    """A ring from its arc indices (a negative index ~i is arc i reversed); each arc after
    the first starts where the previous one ended, so that point is not repeated."""
    points: list[tuple[float, float]] = []
    for index in indices:
        arc = arcs[index] if index >= 0 else arcs[~index][::-1]
        points.extend(arc if not points else arc[1:])
    return points


def land_rings(topology: dict[str, Any], name: str = "land") -> list[list[tuple[float, float]]]:
    """Every ring (outer edges and holes) of the object `name`'s polygons."""
    arcs = decode_arcs(topology)
    rings: list[list[tuple[float, float]]] = []
    obj = topology["objects"][name]
    geometries = obj["geometries"] if obj["type"] == "GeometryCollection" else [obj]
    for geometry in geometries:
        if geometry["type"] == "Polygon":
            polygons = [geometry["arcs"]]
        elif geometry["type"] == "MultiPolygon":
            polygons = geometry["arcs"]
        else:
            continue
        for polygon in polygons:
            rings.extend(ring_points(ring, arcs) for ring in polygon)
    return rings


def unwrapped(ring: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A ring whose longitudes never jump by more than 180° from one position to the next.

    Natural Earth cuts land at the antimeridian, so a ring there (Fiji, Chukotka, the whole of
    Eurasia) steps from 180° to -180° and back; drawn on a flat map as it is, that step is a
    line across the world. Here such a step becomes a step of a degree or so, the ring running
    on past ±180°, and the map draws the land again one turn away. A ring that goes right
    round a pole (Antarctica) is closed along that pole's edge of the map. The ring is then
    moved by whole turns so its middle lies within [-180, 180].
    """
    out = [ring[0]]
    for lon, lat in ring[1:]:
        lon += 360.0 * round((out[-1][0] - lon) / 360.0)
        out.append((lon, lat))
    if abs(out[-1][0] - out[0][0]) > 180.0:  # right round a pole
        pole = -90.0 if sum(lat for _lon, lat in out) < 0 else 90.0
        out += [(out[-1][0], pole), (out[0][0], pole), out[0]]
    lons = [lon for lon, _lat in out]
    shift = 360.0 * round(-(min(lons) + max(lons)) / 2 / 360.0)
    return [(lon + shift, lat) for lon, lat in out]


def rounded(ring: list[tuple[float, float]]) -> list[int]:
    """A ring as flat [lon, lat, ...] hundredths of a degree, repeated positions dropped."""
    flat: list[int] = []
    previous = None
    for lon, lat in ring:
        point = (round(lon * CENTI), round(lat * CENTI))
        if point != previous:
            flat.extend(point)
            previous = point
    return flat


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topojson", type=Path, help="world-atlas's land-110m.json")
    parser.add_argument("--out", type=Path, default=OUT, help="default: %(default)s")
    args = parser.parse_args(argv)
    topology = json.loads(args.topojson.read_text(encoding="utf-8"))
    rings = [r for r in (rounded(unwrapped(ring)) for ring in land_rings(topology)) if len(r) >= 6]
    data = {
        "source": SOURCE,
        "licence": "public domain (Natural Earth)",
        "unit": "hundredths of a degree; each ring is [lon, lat, lon, lat, ...]; a ring at the "
        "antimeridian runs on past 180 degrees (draw it again one turn away)",
        "rings": rings,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
    points = sum(len(r) // 2 for r in rings)
    print(f"{args.out}: {len(rings)} rings, {points} points, {args.out.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
