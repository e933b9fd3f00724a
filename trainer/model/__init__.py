"""The model: PENCIL's token encoding, its BERT layers, attention backends and propagation."""
