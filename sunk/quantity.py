"""Kubernetes resource quantities ("500m", "128Gi"), exact. Shared by policies and translation."""

from sunk.policy.functions import Quantity

__all__ = ["Quantity"]
