"""bake: verified asset layers for ROCm CI images."""

__version__ = "0.2.0"
