"""decodekit-gpt: the reference GPT of the course notes (`decodekit_gpt.gpt`) and GPT-2 weight
loading into it (`decodekit_gpt.gpt2_weights`). Importing this package imports no torch."""

__version__ = "0.1.0"
