"""decodekit-constraints: samplers that constrain which tokens may come next.

logit_bias (OpenAI), sequence_bias and bad_words (HF, multi-token sequences),
allowed_tokens, min_new_tokens, exponential_decay, reasoning_budget (llama.cpp). Each is a processor
(`[B, V] -> [B, V]`), e.g.
`decodekit.Chain.parse("min_new_tokens(8, [50256]) | bad_words([[11, 12]]) | sample")`.
"""

__version__ = "0.1.0"
