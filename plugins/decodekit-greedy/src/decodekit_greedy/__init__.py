"""decodekit-greedy: the `greedy` selector (argmax, the lowest token id on ties).

`from decodekit_greedy.greedy import Greedy`; the entry point, `plugin`, imports no torch.
"""

__version__ = "0.1.0"
