"""decodekit-top-p: the `top_p` (nucleus) processor.

`from decodekit_top_p.top_p import TopP`; the entry point, `plugin`, imports no torch.
"""

__version__ = "0.1.0"
