"""The one error the data layer raises for bad input, and the one warning it gives."""


class DataError(ValueError):
    """Bad data on disk or on the wire. The message is one line saying what is wrong and what to do,
    so the command line can print it as it is, without a traceback."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # one line, whatever the pieces held


class DataWarning(UserWarning):
    """Something about the data that reluattn worked around (a skipped file, a rebuilt cache); the message
    is one line, so a command line can print it as a notice."""
