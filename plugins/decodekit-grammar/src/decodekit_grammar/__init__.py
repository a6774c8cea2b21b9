"""decodekit-grammar: structured generation as processors — `json_schema`, `json`, `regex` and `grammar` (Lark).

Each stage removes every token that would take a row's text out of its grammar, and ends the row when
the grammar is complete. A stage is a pure function of each row's generated tokens (`matchers`), so it is
exact under speculative decoding and beam search. The grammar engine is llguidance, behind a small
interface (`engine`); a tokenizer takes part by stating its tokens' bytes (`vocabulary`).
"""

__version__ = "0.1.0"
