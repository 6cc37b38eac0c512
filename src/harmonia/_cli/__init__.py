"""The ``harmonia`` command (the top layer: it may import anything below it).

The entry point is :func:`harmonia._cli.main.main`; ``io`` reads the command's
inputs and ``inspect`` draws token streams for people.
"""
