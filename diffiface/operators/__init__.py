"""The public operators and their prepare_* functions, each a declaration over the shell."""
