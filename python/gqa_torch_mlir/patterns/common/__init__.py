"""Pieces that lowerings of several domains share (not lowerings themselves)."""
