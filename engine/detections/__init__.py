"""Detector and classifier output on indexed photos: boxes, labels, empty frames, crops.

`records` holds the plain values (a box, a detection, a frame a source looked at); `store`
writes and reads them in the catalog (tables of migration 0021).
"""
