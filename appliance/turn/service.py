"""The TURN service as the rest of the appliance sees it: start/stop, peer rules, announced peers, credentials."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from appliance.audit import service as audit
from appliance.clock import now
from appliance.config import Settings, parse_cidrs
from appliance.errors import InvalidRequest
from appliance.events import CandidatesAnnounced, WorkerJoined, WorkerLeft
from appliance.turn import credentials
from appliance.turn.announced import AnnouncedPeers
from appliance.turn.metering import Meter
from appliance.turn.policy import PeerPolicy, own_addresses
from appliance.turn.server import TurnServer
from appliance.turn.tables import PeerRules

log = logging.getLogger(__name__)


class TurnService:
    def __init__(self, settings: Settings, secret: str):
        self.settings = settings
        self.secret = secret
        self._own = own_addresses()
        self.announced = AnnouncedPeers(grace=settings.turn_peer_grace_seconds)
        self._policy = self._build_policy("", "")
        self.server = TurnServer(
            secret=secret,
            realm=settings.turn_realm,
            policy=lambda: self._policy,
            min_port=settings.turn_min_port,
            max_port=settings.turn_max_port,
            max_allocations=settings.turn_max_allocations,
            max_allocations_per_account=settings.turn_max_allocations_per_account,
            bandwidth=settings.turn_bandwidth_per_allocation,
            nonce_lifetime=settings.turn_nonce_seconds,
            on_allocation_end=lambda allocation: self.meter.allocation_ended(allocation),
        )
        self.meter = Meter(lambda: self.server.allocations.values())

    def _build_policy(self, admin_allowed: str, admin_denied: str) -> PeerPolicy:
        return PeerPolicy(
            allowed=parse_cidrs(self.settings.turn_allowed_peers) + parse_cidrs(admin_allowed),
            denied=parse_cidrs(self.settings.turn_denied_peers) + parse_cidrs(admin_denied),
            own=self._own,
            announced=self.announced,
        )

    async def start(self) -> None:
        await self.load_rules()
        await self.server.start(self.settings.host, self.settings.turn_port)
        self.meter.start()

    async def stop(self) -> None:
        await self.server.stop()
        await self.meter.stop()
        self.announced.close()

    # The fleet's events: which addresses the relay serves (policy.py, announced.py).

    def candidates_announced(self, event: CandidatesAnnounced) -> None:
        self.announced.announce(event.worker.worker_id, event.addresses)

    def worker_joined(self, event: WorkerJoined) -> None:
        self.announced.stay(event.worker.worker_id)

    def worker_left(self, event: WorkerLeft) -> None:
        self.announced.leave(event.worker.worker_id)

    async def rules(self) -> tuple[str, str]:
        row = await PeerRules.select(PeerRules.allowed, PeerRules.denied).first()
        return (row["allowed"], row["denied"]) if row else ("", "")

    async def load_rules(self) -> None:
        self._policy = self._build_policy(*await self.rules())

    async def save_rules(self, allowed: str, denied: str) -> None:
        try:
            policy = self._build_policy(allowed, denied)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        before = await self.rules()
        values = {PeerRules.allowed: allowed.strip(), PeerRules.denied: denied.strip(), PeerRules.updated_at: now()}
        async with PeerRules._meta.db.transaction():
            if await PeerRules.exists():
                await PeerRules.update(values, force=True)
            else:
                await PeerRules.insert(PeerRules(allowed=allowed.strip(), denied=denied.strip(), updated_at=now()))
        self._policy = policy
        await audit.note(
            "settings.relay_peers",
            "TURN relay peer rules",
            {"allowed": before[0], "denied": before[1]},
            {"allowed": allowed.strip(), "denied": denied.strip()},
        )

    def ice_servers(self, account_id: int, run_id: int | None = None) -> list[dict]:
        host = self.settings.turn_host or urlsplit(self.settings.base_url).hostname or "localhost"
        return credentials.ice_servers(
            self.secret, host, self.settings.turn_port, account_id, run_id, self.settings.turn_credential_ttl_seconds
        )
