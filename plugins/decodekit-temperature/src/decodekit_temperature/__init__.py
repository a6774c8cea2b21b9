"""decodekit-temperature: the `temperature` processor (logits / T; T = 0 is greedy).

`from decodekit_temperature.temperature import Temperature`; the entry point, `plugin`, imports no torch.
"""

__version__ = "0.1.0"
