"""Lowering a validated `SimConfig` into the resolved settings every stage is built from."""

from servesim.build.lower import LoweredRun, PoolSpec, TransferSpec, lower

__all__ = ["LoweredRun", "PoolSpec", "TransferSpec", "lower"]
