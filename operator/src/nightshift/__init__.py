"""Nightshift: batch science pipelines on Kubernetes."""

__version__ = "0.1.0"
