"""The one error type the test bed raises for things an operator can fix."""


class TestbedError(Exception):
    """A problem with a clear, one-line explanation (no traceback is shown for it)."""

    __test__ = False  # not a pytest test class, despite its name
