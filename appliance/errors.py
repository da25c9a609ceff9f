"""Refusals a domain's service functions raise; routes turn them into their HTTP status.

The message is written for people and shown as it is (in JSON errors and on pages).
"""


class ServiceError(Exception):
    """A request a domain cannot honour; ``status`` is the HTTP status, ``extra`` more for API clients."""

    status = 400
    extra: dict | None = None


class InvalidRequest(ServiceError):
    status = 400


class Forbidden(ServiceError):
    status = 403


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409


class TooLarge(ServiceError):
    status = 413


class Unavailable(ServiceError):
    status = 503
