"""Map chosen configurations to GPU ids on nodes."""

from oak.placement.placer import PlacementError, place

__all__ = ["PlacementError", "place"]
