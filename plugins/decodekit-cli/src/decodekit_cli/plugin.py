"""The command line's entry point in the `decodekit` group: it registers nothing (it adds commands, not
samplers, caches, models or strategies), and is found and listed the way every other plugin is."""
