"""The window's offline map: Natural Earth's 1:110m land as lon/lat rings (land-110m.json)."""
