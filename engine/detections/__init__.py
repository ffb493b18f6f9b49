"""Detector and classifier output on indexed photos: boxes, labels, empty frames, crops.

`records` holds the plain values (a box, a detection, a frame a source looked at); `store`
writes and reads them in the catalog (tables of migration 0021). `importing` reads a file of
detector or classifier output onto the photos (readers: `megadetector`, `speciesnet`); `crops`
cuts and encodes the boxes above a threshold into `crop_embeddings`, `crop_index` is their
vector index per model; `demo` reads the camera-trap demo's detections.json.
"""
