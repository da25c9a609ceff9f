"""Ranks talking to ranks inside a stage: indirect messages, direct links, and the parameter server.

Indirect messages (the default) are stored where they were written (a blob in the sender's tab, or
an object in the run's cloud bucket) and posted in the run's mailbox under (group, stage, sender,
receiver, tag); a receive waits for its letter, then the blob is copied to the receiver's tab over
WebRTC. The mailbox is keyed by rank, not worker, so a rank's replacement receives what was sent to
the rank before it joined, and a sender's replacement that sends again replaces its letter.

Direct messages never touch the appliance: it only pairs the two workers (a link, like a transfer,
is what allows their signaling) and tells every rank when one of them loses its worker.

Every request names its task; the coordinator has checked it is the sender's current attempt.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field

from appliance.cloud import service as cloud
from appliance.events import TransferFinished
from appliance.fleet import protocol as p
from appliance.fleet.registry import Fleet, Worker, copy_timeout
from appliance.fleet.transfers import TransferTag
from appliance.jobs.execution import Task, stage_label
from appliance.jobs.paramserver import ParameterError, ParameterServer

MailKey = tuple[str, int, int, int, str]  # group, stage, from rank, to rank, tag


@dataclass
class Letter:
    location: str  # sha256 (pmrfs) or object key (s3)
    size: int
    attempt: int  # the sender's attempt that posted it
    holders: set[str] = field(default_factory=set)


class Mailbox:
    """One run's indirect messages and the receives waiting for them."""

    def __init__(self) -> None:
        self.letters: dict[MailKey, Letter] = {}
        self.posted: dict[MailKey, asyncio.Event] = {}

    def post(self, key: MailKey, letter: Letter) -> str | None:
        """None when posted; else why not (a tag is used once per attempt of a sender)."""
        earlier = self.letters.get(key)
        if earlier is not None and earlier.attempt >= letter.attempt:
            group, stage, sender, receiver, tag = key
            return (
                f"tag {tag!r} was already used for a message from rank {sender} to rank {receiver} in "
                f"{stage_label(stage)} of group {group}: tags are unique per stage and group"
            )
        self.letters[key] = letter
        self.posted.setdefault(key, asyncio.Event()).set()
        return None

    async def collect(self, key: MailKey) -> Letter:
        while (letter := self.letters.get(key)) is None:
            await self.posted.setdefault(key, asyncio.Event()).wait()
        return letter

    def withdraw(self, key: MailKey, letter: Letter) -> None:
        """The letter's blob is gone with its holders: wait for the sender's replacement to send again."""
        if self.letters.get(key) is letter:
            del self.letters[key]
            self.posted[key] = asyncio.Event()

    def blobs(self) -> list[Letter]:
        return list(self.letters.values())


class Peers:
    """Handles a run's peer and parameter-server requests (the coordinator routes them here)."""

    def __init__(self, fleet: Fleet, spawn: Callable[..., None], replacement_grace: float):
        self.fleet = fleet
        self.spawn = spawn
        # How long a link to a rank being replaced waits for the replacement (the run fails after it).
        self.replacement_grace = replacement_grace
        # Requests that may wait (receives, links, reads, clocks) by run: cancelled when it ends.
        self.waits: dict[int, set[asyncio.Task]] = {}

    def _wait(self, run, coro: Coroutine) -> None:
        self.spawn(coro, self.waits.setdefault(run.run_id, set()))

    def handle(self, run, task: Task, worker: Worker, message: object) -> None:
        if isinstance(message, p.Frame):
            self._ps_value(run, task, worker, message.header, message.payload)
        elif isinstance(message, p.PeerSend):
            self._send(run, task, worker, message)
        elif isinstance(message, p.PeerPutUrl):
            self._wait(run, self._put_url(run, task, worker, message))
        elif isinstance(message, p.PeerReceive):
            self._wait(run, self._receive(run, task, worker, message))
        elif isinstance(message, p.PeerLink):
            self._wait(run, self._link(run, task, worker, message))
        elif isinstance(message, p.PsRead):
            self._wait(run, self._ps_read(run, task, worker, message))
        elif isinstance(message, p.PsClock):
            self._wait(run, self._ps_clock(run, task, worker, message))

    # ------------------------------------------------------------ indirect messages

    def _rank_error(self, run, rank: int) -> str | None:
        count = run.execution.worker_count
        return None if rank < count else f"rank {rank} does not exist (this run has ranks 0 to {count - 1})"

    def _send(self, run, task: Task, worker: Worker, message: p.PeerSend) -> None:
        error = self._rank_error(run, message.to_rank)
        location = message.key if run.storage is not None else message.sha256
        if not error and location is None:
            error = "a message needs the object key (s3 runs) or the blob's sha256 (pmrfs runs)"
        issued = self._mail_key(run, task, message.to_rank, message.tag) if run.storage is not None else location
        if not error and location != issued:
            # Exactly the key peer-put-url issued: one with "../" in it would be another run's object.
            error = "that object key was not issued for this message"
        if not error:
            holders = {worker.worker_id} if run.storage is None else set()
            key = (task.group, task.stage, task.rank, message.to_rank, message.tag)
            error = run.mail.post(key, Letter(location, message.size, task.attempt, holders))
        self.spawn(worker.send(p.PeerSendReply(reply_to=message.id, error=error or "")))

    def _mail_key(self, run, task: Task, to_rank: int, tag: str) -> str:
        # The tag in hex: any string makes a valid object key.
        where = f"{run.key_prefix()}/messages/{task.group}/{stage_label(task.stage)}/rank-{task.rank:05d}"
        return f"{where}/to-{to_rank:05d}/attempt-{task.attempt}/{tag.encode().hex()}"

    async def _put_url(self, run, task: Task, worker: Worker, message: p.PeerPutUrl) -> None:
        error = "this run stores its data in PMRFS" if run.storage is None else self._rank_error(run, message.to_rank)
        if error:
            await worker.send(p.PeerPutUrlReply(reply_to=message.id, error=error))
            return
        key = self._mail_key(run, task, message.to_rank, message.tag)
        url = cloud.presign_put(run.storage, key)
        await worker.send(p.PeerPutUrlReply(reply_to=message.id, url=url, key=key))

    async def _receive(self, run, task: Task, worker: Worker, message: p.PeerReceive) -> None:
        if error := self._rank_error(run, message.from_rank):
            await worker.send(p.PeerMessage(reply_to=message.id, error=error))
            return
        key = (task.group, task.stage, message.from_rank, task.rank, message.tag)
        tag = TransferTag(account=run.owner_id, run=run.run_id, private=run.spec.private_mode)
        while True:
            letter = await run.mail.collect(key)
            if not self._current(run, task, worker):
                return
            if run.storage is not None:
                url = cloud.presign_get(run.storage, letter.location)
                await worker.send(p.PeerMessage(reply_to=message.id, url=url, size=letter.size))
                return
            if worker.worker_id in letter.holders or await self._copy(letter, worker, tag):
                letter.holders.add(worker.worker_id)
                await worker.send(p.PeerMessage(reply_to=message.id, sha256=letter.location, size=letter.size))
                return
            if not any(self.fleet.get(h) for h in letter.holders):
                run.mail.withdraw(key, letter)  # its sender left: its replacement sends it again
            else:
                await asyncio.sleep(1)  # a copy failed between two live workers: try again

    async def _copy(self, letter: Letter, target: Worker, tag: TransferTag) -> bool:
        for holder in sorted(letter.holders):
            source = self.fleet.get(holder)
            if source is not None and await self.fleet.copy_blob(
                letter.location, letter.size, source, target, copy_timeout(letter.size), tag
            ):
                return True
        return False

    def _current(self, run, task: Task, worker: Worker) -> bool:
        """Whether the task is still this worker's running attempt (a stale wait answers no one)."""
        return not run.ending and task.worker_id == worker.worker_id and task.state in ("staging", "running")

    # ------------------------------------------------------------ direct links

    async def _link(self, run, task: Task, worker: Worker, message: p.PeerLink) -> None:
        error = self._rank_error(run, message.to_rank)
        target = None if error else await self._holder(run, task.group, message.to_rank)
        if not error and target is None:
            error = f"rank {message.to_rank} of group {task.group} has no worker (it was not replaced in time)"
        if not error and target is worker:
            error = "a rank cannot link to itself"
        if error:
            await worker.send(p.PeerLinkReply(reply_to=message.id, error=error))
            return
        tag = TransferTag(account=run.owner_id, run=run.run_id, private=run.spec.private_mode)  # billed to the run
        accounts = {worker.worker_id: worker.account_id, target.worker_id: target.account_id}
        link = self.fleet.transfers.link(worker.worker_id, target.worker_id, run.run_id, tag, accounts)
        await target.send(
            p.PeerLinkOpen(link_id=link.id, from_=worker.worker_id, run_id=run.run_id, from_instance=worker.instance)
        )
        await worker.send(
            p.PeerLinkReply(reply_to=message.id, link_id=link.id, to=target.worker_id, to_instance=target.instance)
        )

    async def _holder(self, run, group: str, rank: int) -> Worker | None:
        """The worker holding the rank; while it is being replaced, its replacement once it joins."""
        deadline = time.monotonic() + self.replacement_grace
        while time.monotonic() < deadline:
            holder = run.execution.groups[group].ranks[rank]
            if holder is not None and (worker := self.fleet.get(holder)) is not None:
                return worker
            await asyncio.sleep(0.25)
        return None

    def rank_lost(self, run, group: str, rank: int, why: str) -> None:
        """Tell the other ranks of the group: direct receives from it and collectives cannot complete."""
        run.params.rank_lost(group, rank)
        lost = p.PeerLost(run_id=run.run_id, group=group, rank=rank, reason=why)
        for holder in run.execution.groups[group].ranks:
            if holder is not None and (other := self.fleet.get(holder)) is not None:
                self.spawn(other.send(lost))

    async def run_ended(self, run) -> None:
        """Stop the run's waiting requests; drop its links and the message blobs and objects."""
        for task in self.waits.pop(run.run_id, set()):
            task.cancel()
        for link in self.fleet.transfers.close_links(run_id=run.run_id):
            await self.fleet.events.publish(TransferFinished(link, True))  # billing meters what it carried
        if run.storage is not None:
            self.spawn(cloud.delete_prefix(run.storage, f"{run.key_prefix()}/messages/"))
        for letter in run.mail.blobs():
            for holder in letter.holders:
                if (worker := self.fleet.get(holder)) is not None:
                    self.spawn(worker.send(p.BlobDelete(sha256=letter.location)))

    # ------------------------------------------------------------ the parameter server

    def _ps_value(self, run, task: Task, worker: Worker, header: p.PsWrite | p.PsUpdate, payload) -> None:
        params: ParameterServer = run.params
        try:
            if isinstance(header, p.PsWrite):
                version = params.write(task.group, header.key, header.dtype, payload, header.if_version)
            else:
                version = params.update(task.group, header.key, header.dtype, header.op, payload)
            reply = p.PsReply(reply_to=header.id, version=version)
        except ParameterError as exc:
            current = params.values.get((task.group, header.key))
            reply = p.PsReply(reply_to=header.id, error=str(exc), version=current.version if current else 0)
        self.spawn(worker.send(reply))

    async def _ps_read(self, run, task: Task, worker: Worker, message: p.PsRead) -> None:
        params: ParameterServer = run.params
        await params.within_staleness(task.group, task.rank)
        if not self._current(run, task, worker):
            return
        try:
            value = params.read(task.group, message.key)
        except ParameterError as exc:
            await worker.send(p.PsReply(reply_to=message.id, error=str(exc)))
            return
        header = p.PsReply(
            reply_to=message.id,
            dtype=value.dtype,
            version=value.version,
            clock=params.clock_of(task.group, task.rank),
        )
        await worker.send(p.Frame(header=header, payload=value.value.tobytes()))

    async def _ps_clock(self, run, task: Task, worker: Worker, message: p.PsClock) -> None:
        params: ParameterServer = run.params
        clock = params.tick(task.group, task.rank)
        await params.within_staleness(task.group, task.rank)
        if not self._current(run, task, worker):
            return
        await worker.send(p.PsReply(reply_to=message.id, clock=clock))
