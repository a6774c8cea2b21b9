"""Reference models that speak decodekit's model protocol."""
