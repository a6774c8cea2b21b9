"""Cache backends that score their entries and keep the best within a budget: `h2o`, `tova`, `snapkv`,
`knorm` and `streaming` (docs/caches.md). The entry point, `plugin`, imports no torch."""

__version__ = "0.1.0"
