"""Adapters: the ports implemented on real products. Imported only by composition roots."""
