"""Thin typer wrappers: parse options, call one engine function, render the result."""
