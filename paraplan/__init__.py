"""The paraplan command line: parse arguments, call the library, print. No logic of its own."""
