"""The ``harmonia`` command (the top layer: it may import anything below it).

The entry point is :func:`harmonia._cli.main.main`; ``io`` reads files and JSON,
``tokens`` token inputs (streamed), and ``inspect`` draws token streams for people.
"""
