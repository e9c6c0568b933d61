"""Map chosen configurations to GPU ids on nodes."""

from oak.placement.placer import PlacementError, place, place_replicas

__all__ = ["PlacementError", "place", "place_replicas"]
