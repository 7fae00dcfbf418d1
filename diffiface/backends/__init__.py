"""One module per framework; each imports its framework and registers itself."""
