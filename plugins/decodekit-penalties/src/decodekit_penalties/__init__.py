"""decodekit-penalties: samplers that penalise repetition.

frequency_penalty, presence_penalty (OpenAI definitions, over the generated tokens),
no_repeat_ngram (HF), dry (llama.cpp). Each is a processor (`[B, V] -> [B, V]`);
create them by name, e.g. `decodekit.create("dry", multiplier=0.8)`, or in a chain
string `"frequency_penalty(0.5) | sample"`.
"""

__version__ = "0.1.0"
