"""The project's own error types."""


class OakInputError(ValueError):
    """Bad user input: message names the file/line/field, the value and what was expected."""
