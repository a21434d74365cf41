"""Benchmarks that run inside the images. Imports nothing from `launch`."""
