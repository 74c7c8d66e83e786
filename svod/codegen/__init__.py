"""Lowering, linearizing and rendering kernels to source."""
