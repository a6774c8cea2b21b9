"""decodekit-repetition-penalty: the `repetition_penalty` processor (CTRL, HF sign rule).

`from decodekit_repetition_penalty.repetition_penalty import RepetitionPenalty`; the entry point,
`plugin`, imports no torch.
"""

__version__ = "0.1.0"
