"""decodekit-ray's entry point in the `decodekit` group: it registers nothing (it runs batch jobs, it
adds no sampler, cache, model or strategy), and is found and listed the way every other plugin is."""
