"""One module per Lambda, named as in functions/: the handler Lambda calls."""
