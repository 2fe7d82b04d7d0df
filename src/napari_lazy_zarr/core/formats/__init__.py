"""Formats: metadata turned into layer specs (OME-Zarr images and labels, HCS plates,
stack files); nothing here reads a chunk.

A format reads metadata documents through `storage` and opens the `sources` its layers
are made of; the cache and the readers above never see it.
"""
