"""decodekit-adaptive: samplers that adapt to the distribution or to what was sampled.

dynamic_temperature (llama.cpp temp_ext, a processor), mirostat, mirostat_v2 and adaptive_p
(selectors with per-row state), gumbel (a selector: Gumbel-max, distribution-equal to `sample`).
`decodekit.Chain.parse("dynamic_temperature(1.0, 0.5) | gumbel")`.
"""

__version__ = "0.1.0"
