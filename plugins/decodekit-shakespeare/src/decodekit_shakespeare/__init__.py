"""decodekit-shakespeare: the `tiny-shakespeare` demo model, a character-level GPT.

`decodekit_shakespeare.model` loads it (with torch), `decodekit_shakespeare.tokenizer` holds its
`CharTokenizer`; the entry point, `plugin`, imports no torch.
"""

__version__ = "0.1.0"
