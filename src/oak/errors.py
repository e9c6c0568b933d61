"""The project's own error types."""


class OakInputError(ValueError):
    """Bad user input: message names the file/line/field, the value and what was expected."""


class PolicyError(OakInputError, RuntimeError):
    """A policy returned an allocation the world cannot run (an invalid configuration, more GPUs than exist), or a
    user's policy failed in ``decide``: the message names the policy, the round's time, the job and the
    configuration. An input error when the policy is a user's (``--policy FILE.py:NAME``); a RuntimeError for code
    that catches those. ``what``: for a failed ``decide``, what the policy did, without the round's time
    ("raised KeyError: … (file:line, in decide)"), so that a service that reports it every round says it once."""

    def __init__(self, message: str, what: str | None = None) -> None:
        super().__init__(message)
        self.what = what
