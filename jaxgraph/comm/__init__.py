"""Collectives and communication strategies used inside ``shard_map`` programs."""

from jaxgraph.comm.ring import ring_exchange, ring_exchange_bytes

__all__ = ["ring_exchange", "ring_exchange_bytes"]
