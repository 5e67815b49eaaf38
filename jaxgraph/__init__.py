"""jaxgraph."""
