"""Errors of the policy package.

``PolicyFileError(ValueError)`` is raised for a policy file that cannot be used: unreadable, not YAML, not
matching the schema, or with an example whose decision differs from the expected one. It names the file, the
1-based line (when known) and the dotted key (``rules.3.decision``).
"""

from __future__ import annotations

from .. import errors as _errors

__all__ = ["PolicyFileError"]


class PolicyFileError(_errors.PolicyFileError, ValueError):
    """A policy file was refused.

    :ivar path: the file as given to the loader (``"<string>"`` for text).
    :ivar line: 1-based line of the offending node, or None when it is not known.
    :ivar key: dotted location in the document (``rules.2.match``), or None for the whole file.
    :ivar message: what is wrong, without the location prefix.
    """

    def __init__(self, path: str, line: int | None, key: str | None, message: str) -> None:
        self.path = path
        self.line = line
        self.key = key
        self.message = message
        where = path if line is None else f"{path}:{line}"
        if key:
            where += f": {key}"
        Exception.__init__(self, f"{where}: {message}")
        self.retryable = False
