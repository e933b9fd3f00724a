"""The loader: shards streamed into token-budget micro-batches, a block of links at a time."""
