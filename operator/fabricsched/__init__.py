"""fabricsched: topology- and health-aware gang placement for GPU training fabrics."""

__version__ = "0.1.0"
