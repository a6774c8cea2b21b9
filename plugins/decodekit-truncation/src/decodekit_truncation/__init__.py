"""decodekit-truncation: samplers that truncate the vocabulary.

min_p, typical, epsilon, eta, top_n_sigma, top_a, top_h, xtc. Each is a processor
(`[B, V] -> [B, V]`, removed tokens at -inf); create them by name with
`decodekit.create("min_p", p=0.05)` or in a chain string `"min_p(0.05) | sample"`.
"""

__version__ = "0.1.0"
