"""decodekit-top-k: the `top_k` processor (keep the k largest logits, ties at the k-th kept).

`from decodekit_top_k.top_k import TopK`; the entry point, `plugin`, imports no torch.
"""

__version__ = "0.1.0"
