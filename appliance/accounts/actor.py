"""Who is asking, as domain services see it: an account id and its role (no session or token)."""

from __future__ import annotations

import msgspec


class Actor(msgspec.Struct, frozen=True):
    user_id: int
    role: str

    @classmethod
    def of(cls, principal) -> Actor:
        return cls(user_id=principal.user_id, role=principal.role)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def is_coordinator(self) -> bool:
        """Coordinators and admins: they may create buckets and run jobs."""
        return self.role in ("admin", "coordinator")
