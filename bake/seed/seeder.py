"""Who copies, who waits, who takes over: one location of node storage made to serve a consumer's files.

The first job to take the right to copy (``bake.seed.right``) copies what is missing into its own
partial; the others wait, polling the location and every partial's beat. A waiter is served when
the files are in place; it takes the right over when no partial made progress for the stale bound;
it gives up, and the job is served job-local, when its bound runs out: the stale bound, a margin,
and the bytes it saw missing at the floor rate of a local disk (read, hashed and written once),
computed by the waiter itself and never taken from another copier's word. docs/runtime.md has the
state table.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from bake import atomic
from bake.byte_sizes import MIB
from bake.seed import checks, copier, nodefs, plan, stamp
from bake.seed.liveness import POLL_S, STALE_S, Partial, Watch
from bake.seed.right import Right

FLOOR_BYTES_PER_S = 32 * MIB  # a local disk, a copy read, hashed and written once
MARGIN_S = 10.0
SERVED, LEFT, MOVED, FAILED = "served", "left as is", "served job-local", "failed verification"


def bound(bytes_left: int) -> float:
    """How long a waiter waits, in seconds: the stale bound, a margin, the bytes left at the floor rate."""
    return STALE_S + MARGIN_S + bytes_left / FLOOR_BYTES_PER_S


@dataclass(frozen=True)
class Outcome:
    """What became of the location: SERVED, LEFT (node storage left as is), MOVED (the job is served
    job-local) or FAILED (BAKE_VERIFY); the note or reason; the exit code; whether something was planted."""

    kind: str
    text: str
    code: int = 0
    planted: bool = False


@dataclass(frozen=True)
class Request:
    """One location to serve: where, whose records, the asset directory, and the entrypoint's flags."""

    location: Path
    records: plan.Records
    assets: Path
    copy: bool = True
    verify: bool = False


def seed(request: Request) -> Outcome:
    """Serve ``request.location`` from node storage, copying what is missing; returns the Outcome."""
    try:
        loc_fd = os.open(request.location, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        return Outcome(LEFT, f"node storage that cannot be read ({exc.strerror})", 6)
    try:
        return _Seeding(request, loc_fd).run()
    except nodefs.Planted as planted:
        return Outcome(MOVED, f"node storage where {planted}, which is never followed or opened", 6, True)
    except nodefs.Unwritable as exc:
        return Outcome(LEFT, f"node storage that cannot be written ({exc})", 6)
    finally:
        os.close(loc_fd)


@dataclass
class _Wait:
    """A waiter's bound (its deadline, on its monotonic clock, and the bytes it saw missing) and watch."""

    deadline: float
    bytes: int
    watch: Watch
    started: float = field(default_factory=time.monotonic)
    waited: bool = False


@dataclass
class _Seeding:
    request: Request
    loc_fd: int
    notes: list[str] = field(default_factory=list)
    hashed: set[str] = field(default_factory=set)  # names this process copied, and so hashed
    problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def where(self) -> str:
        return str(self.request.location)

    def run(self) -> Outcome:
        records = self.request.records
        if records.damaged:  # named above it, in a refused line of its own
            return Outcome(
                LEFT, "node storage, left as is: a record of its files in bake.serve cannot be read", 6
            )
        names = [*records.files, *records.links]
        first = plan.look(self.loc_fd, self.where, names)
        self.problems = first.problems
        if first.missing and not self.request.copy:
            return Outcome(
                LEFT,
                f"node storage, left as is under BAKE_SEED=0 ({first.missing[0].name}: nothing there)",
                6,
            )
        if first.missing:
            state = records.set.state.split("/")
            with nodefs.walked(self.loc_fd, state, self.where, make=True) as state_fd:
                for path in records.dirs:
                    if path != ".":
                        with nodefs.walked(self.loc_fd, path.split("/"), self.where, make=True):
                            pass
                outcome = self._fill(state_fd, first)
                return outcome or self._finish(names)
        return self._finish(names)

    def _fill(self, state_fd: int, first: plan.Look) -> Outcome | None:
        """Copy what is missing, or wait for the copier that does: None once nothing is missing."""
        where = f"{self.where}/{self.request.records.set.state}"
        wait = _Wait(
            time.monotonic() + bound(first.bytes_missing), first.bytes_missing, Watch(state_fd, where)
        )
        while True:
            right = Right(state_fd, where)
            try:
                outcome = self._copy_or_wait(state_fd, right, wait, first.missing)
            finally:
                if right.note and right.note not in self.notes:
                    self.notes.insert(0, right.note)
                right.release()
            if outcome is not _TAKEN_OVER:
                return outcome  # type: ignore[return-value]

    def _copy_or_wait(self, state_fd: int, right: Right, wait: _Wait, missing: list[plan.Name]) -> object:
        """Until nothing is missing (None), the copy fails (an Outcome), the bound runs out (an Outcome),
        or this copier's copy was taken over (_TAKEN_OVER)."""
        while True:
            missing = plan.look(self.loc_fd, self.where, missing).missing
            if not missing:
                if wait.waited:
                    waited = time.monotonic() - wait.started
                    self.notes.append(f"waited {waited:.0f} s for another copier's copy into {self.where}")
                return None
            if self._took(right, wait):
                # The copier before may have installed them between that look and its letting go: look
                # again now that no other copier can, or this one would copy them a second time.
                missing = plan.look(self.loc_fd, self.where, missing).missing
                if missing:
                    return self._copy(state_fd, right.where, missing)
                continue
            if time.monotonic() >= wait.deadline:
                return Outcome(MOVED, _ran_out(wait.deadline - wait.started, wait.bytes), 6)
            time.sleep(POLL_S)

    def _took(self, right: Right, wait: _Wait) -> bool:
        """Take the right to copy; or, waiting, watch the partials, and take over after the stale bound."""
        if right.take():
            return True
        wait.waited = True
        wait.watch.poll()
        return wait.watch.quiet >= STALE_S and self._take_over(wait.watch, right)

    def _take_over(self, watch: Watch, right: Right) -> bool:
        """No progress for the stale bound: remove the partials that stood still, and claim the right."""
        for name in watch.stale():
            if watch.reclaim(name):
                stood = f"{STALE_S:.0f} s without progress"
                self.notes.append(f"removed a dead copier's partial {watch.where}/{name} ({stood})")
        if not right.take_over(watch.claim):
            return False
        self.notes.append(f"took over the copy into {self.where} after {watch.quiet:.0f} s without progress")
        return True

    def _copy(self, state_fd: int, where: str, missing: list[plan.Name]) -> Outcome | object | None:
        """As the copier: copy ``missing`` in. None when done, an Outcome when it failed, _TAKEN_OVER."""
        source = self.request.assets / self.request.records.set.root
        partial = Partial(state_fd, where)
        try:
            done = copier.copy_in(source, self.loc_fd, self.where, partial, missing)
        except copier.TakenOver as taken:
            self.notes.append(
                f"another copier took over after {max(taken.args[0], STALE_S):.0f} s without progress"
            )
            return _TAKEN_OVER
        except copier.BadCopy as bad:
            return Outcome(LEFT, f"node storage where a copy did not match its sha256: {bad}", 3)
        except copier.MissingSource as gone:
            return Outcome(LEFT, f"the image lacks {gone}, which bake.serve names: rebuild the image", 6)
        except OSError as exc:
            return Outcome(LEFT, _cannot_write(exc, self.where, missing), 6)
        finally:
            partial.remove()
        self.hashed.update(r.name for r in missing)
        self.problems += done.problems
        if done.files:
            self.notes.append(f"copied {done.files} file(s), {done.bytes} bytes, into {self.where}")
        return None

    def _finish(self, names: list[plan.Name]) -> Outcome:
        """Prove every name served (the directories recorded first, for the stamp), hash under --verify."""
        records = self.request.records
        lines = stamp.dir_lines(self.loc_fd, self.where, records.dirs)
        final = plan.look(self.loc_fd, self.where, names)
        problems = self.problems + final.problems + [(r.name, "nothing there") for r in final.missing]
        if problems:
            name, why = problems[0]
            return Outcome(MOVED, f"node storage where {name} is {why}, and nothing there is changed", 6)
        if self.request.verify:
            unhashed = [f for f in records.files if f.name not in self.hashed]
            problem = checks.served_problem(self.loc_fd, self.where, unhashed, linked=False)
            if problem:
                return Outcome(FAILED, problem, 3)
        if lines is not None:
            try:
                with nodefs.walked(self.loc_fd, records.set.state.split("/"), self.where) as state_fd:
                    stamp.write(state_fd, records.set.digest, str(self.request.assets), lines)
            except (FileNotFoundError, nodefs.Planted):
                pass  # no state of bake's there (nothing copied): served, unstamped
        return Outcome(SERVED, "; ".join(self.notes))


_TAKEN_OVER = object()


def _ran_out(waited: float, bytes_left: int) -> str:
    return (
        f"node storage where another copier has been copying for over {waited:.0f} s (the bound: "
        f"{STALE_S:.0f} s without progress, plus {MARGIN_S:.0f} s, plus 1 s per "
        f"{FLOOR_BYTES_PER_S // MIB} MiB of the {bytes_left} bytes left)"
    )


def _cannot_write(exc: OSError, where: str, missing: list[plan.Name]) -> str:
    if atomic.is_no_space(exc):
        need = sum(getattr(r, "size", 0) for r in missing)
        why = atomic.no_space_error("the copy", Path(where), need, "free space there")
    elif exc.errno == errno.EROFS:
        why = "a read-only filesystem"
    else:
        why = f"copying {len(missing)} file(s) there failed: {exc.strerror or exc}"
    return f"node storage that cannot be written ({why})"
