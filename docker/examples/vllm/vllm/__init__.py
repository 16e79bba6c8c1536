"""A stand-in for the vLLM package: just enough Python to build a wheel and run a GPU-job-like check."""

__version__ = "0.0.0+standin"
