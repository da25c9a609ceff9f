"""Refusals a domain's service functions raise, and the one way each surface shows them.

The message is written for people and shown as it is: the REST API answers JSON with ``status``
(and ``extra``), the dashboard shows it on the page or as a flash message, and the `peermr`
command prints ``peermr: <message>`` and exits with status 1 (appliance/web/errors.py and
appliance/cli.py do the mapping). Exceptions that steer control flow inside a domain (a STUN
error response, an illegal task transition) are not refusals and do not derive from these.
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


class Gone(ServiceError):
    status = 410


class TooManyRequests(ServiceError):
    status = 429


class Unavailable(ServiceError):
    status = 503
