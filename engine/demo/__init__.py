"""The bundled demo: its scenes and the collection writer."""
