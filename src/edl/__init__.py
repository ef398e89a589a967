"""edl: Elastic Deep Learning for Kubernetes."""

__version__ = "0.1.0"
