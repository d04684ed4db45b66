"""Shared model and pure codecs: messages, properties, ids, names, wire codes."""
