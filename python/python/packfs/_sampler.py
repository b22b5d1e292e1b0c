"""The order in which :class:`packfs.torch.ShuffleSampler` gives samples.

Design
------
One global order per ``(seed, epoch)``, the same on every rank: a
permutation of the dataset's indices drawn from numpy's PCG64 seeded with
both numbers, so every process computes it alone and no rank has to send
it to another. Ranks take it round-robin (rank ``r`` gets positions
``r, r + W, r + 2W, ...``): step ``s`` of every rank together covers
positions ``s*B*W .. (s+1)*B*W`` of the global order, which is why the
samples of a global step do not depend on how many ranks share it.

A position in the global order is all a checkpoint needs: ranks move in
lockstep (DDP keeps them so), so after every rank has taken ``k`` samples
the first ``start + k*W`` positions are consumed, whatever ``W`` was, and a
job resumed at another world size splits the rest among its own ranks.

With locality the permutation is built from where samples lie in the image
instead of uniformly. Samples sorted by position are cut into *groups*:
those that start in one aligned span of ``group_bytes`` (what one storage
request fetches: a remote image's ranges are aligned so); the groups
are shuffled and read by ``window`` slots at once, each slot taking the
next group when its own is done; the order takes one sample from every
slot in turn, the slots in a new random order each round. Any ``window``
consecutive samples therefore come from ``window`` different regions of
the image (a batch of that size is as mixed as a uniform shuffle's when the
regions are), while the reads in each region move forward through it, so
that one fetched range or read-ahead serves the samples after it. What is
traded: a group's samples are spread over the time its slot holds it, in
the image's order, and which samples can meet in a batch depends on which
groups share the slots; docs/PYTHON.md says when to turn it off.

Streams
-------
A DataLoader hands its batches to its workers in turn (batch ``i`` to worker
``i mod workers``), and each worker process has its own image and caches.
Under one locality order every batch draws from all ``window`` regions, so
every worker fetches every region: the storage serves the epoch once per
worker. Told the loader's worker count and batch size, the sampler deals
the groups among that many *streams* instead, each with its own ``window``
slots, and takes the samples of global step ``c`` (``batch_size *
world_size`` of them) from stream ``c mod workers``. Every rank's batch of
a step then comes from one stream, the same worker reads the same stream
batch after batch, and the storage serves each region to one worker. What
it costs: ``workers`` times ``window`` regions are open at once, not
``window``. The streams end within a group of each other; the last steps
take from whichever streams still have samples. A state saved under one
dealing resumes in it (the order is the state's, whatever this sampler's
workers and batch); the epochs after use this sampler's.

Read ahead
----------
The order says more than which sample comes next: each slot takes its
groups one after another, so when a slot starts a group, the group it takes
next is known. A :class:`ReadPlan` carries that to the dataset (in each
DataLoader worker): on the first sample it reads of a group, it asks the
image to fetch the whole group (``Image.will_read``: one request a range,
not one a sample), and once it has read half of a group, the slot's next
one, so that the next region is on its way while the rest of the current
one is read. Half, not at once: the later the ask, the fewer regions are
held ahead at any time; half a group's rounds is still many round trips of
any storage. No storage-level detector could guess the next region: groups
follow each other in random order.
"""

from __future__ import annotations

import heapq

import numpy as np

#: Version of the state a sampler saves; a state of another version is refused.
STATE_VERSION = 1


class Layout:
    """Samples grouped by where their bytes lie: ``members`` lists the
    dataset's indices sorted by position in the image, and group ``g`` is
    ``members[bounds[g]:bounds[g + 1]]``.

    ``keys`` order samples by position (the byte offset of each sample's
    data), within ``parts`` when given (the shard of a sharded image).
    A group is the samples that start in one aligned span of
    ``group_bytes`` of one part: a remote image is fetched in aligned ranges,
    so with ``group_bytes`` equal to the range size a group is one request.
    Spans where no sample starts make no group."""

    def __init__(
        self,
        keys: np.ndarray,
        parts: np.ndarray | None,
        group_bytes: int,
        lengths: np.ndarray | None = None,
    ) -> None:
        n = len(keys)
        keys = np.asarray(keys, dtype=np.int64)
        self.keys = keys
        self.group_bytes = group_bytes
        self.parts = None if parts is None else np.asarray(parts, dtype=np.int64)
        #: Bytes of each sample from its key; None when keys are not offsets.
        self.lengths = None if lengths is None else np.asarray(lengths, dtype=np.int64)
        if parts is None:
            members = np.argsort(keys, kind="stable")
        else:
            parts = np.asarray(parts, dtype=np.int64)
            members = np.lexsort((keys, parts))
        span = keys[members] // group_bytes
        starts = np.zeros(n, dtype=bool)
        if n:
            starts[0] = True
            starts[1:] = span[1:] != span[:-1]
            if parts is not None:
                p = parts[members]
                starts[1:] |= p[1:] != p[:-1]
        self.members = members.astype(np.int64)
        self.bounds = np.append(np.flatnonzero(starts), n).astype(np.int64)

    @property
    def groups(self) -> int:
        return len(self.bounds) - 1


def uniform_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """A uniform random permutation of ``range(n)`` for ``(seed, epoch)``."""
    return _rng(seed, epoch).permutation(n).astype(np.int64)


def local_order(
    layout: Layout, window: int, seed: int, epoch: int, streams: int = 1, chunk: int = 0
) -> np.ndarray:
    """The locality order (see the module doc) for ``(seed, epoch)``."""
    return local_schedule(layout, window, seed, epoch, streams, chunk)[0]


def local_schedule(
    layout: Layout, window: int, seed: int, epoch: int, streams: int = 1, chunk: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The locality order for ``(seed, epoch)`` and, for each group, the
    group its slot takes after it (-1 for a slot's last).

    With ``streams`` > 1 (and a ``chunk``: samples of one global step) the
    groups are dealt to that many streams, each its own ``window`` slots,
    and the order takes ``chunk`` samples from each stream in turn (see
    "Streams" in the module doc). One stream is the plain locality order.
    """
    rng = _rng(seed, epoch)
    n = len(layout.members)
    lo, hi = layout.bounds[:-1], layout.bounds[1:]
    sizes = hi - lo
    shuffled = rng.permutation(layout.groups)
    streams = streams if chunk > 0 else 1
    stream_of = np.zeros(layout.groups, dtype=np.int64)
    if streams > 1:
        # Each group to the stream with the fewest samples yet: streams end
        # within a group's length of each other.
        load = [(0, k) for k in range(streams)]
        for g in shuffled.tolist():
            held, k = heapq.heappop(load)
            stream_of[g] = k
            heapq.heappush(load, (held + int(sizes[g]), k))
    # Each stream's `window` slots read its groups one after another; a
    # group goes to the slot that frees first, so the slots stay busy
    # together until the stream's last groups. Its k-th sample is read in
    # round start + k of its stream.
    start = np.empty(layout.groups, dtype=np.int64)
    after = np.full(layout.groups, -1, dtype=np.int64)
    for k in range(streams):
        mine = shuffled[stream_of[shuffled] == k] if streams > 1 else shuffled
        slots = min(window, len(mine))
        last = [-1] * slots
        free = [(0, slot) for slot in range(slots)]
        heapq.heapify(free)
        for g in mine.tolist():
            at, slot = heapq.heappop(free)
            start[g] = at
            if last[slot] >= 0:
                after[last[slot]] = g
            last[slot] = g
            heapq.heappush(free, (at + int(sizes[g]), slot))
    group_of = np.repeat(np.arange(layout.groups), sizes)
    rounds = start[group_of] + (np.arange(n) - lo[group_of])
    # Each round takes one sample of every busy slot, in random order: any
    # `window` consecutive samples of a stream come from `window` different
    # regions.
    sample_stream = stream_of[group_of]
    ranked = np.lexsort((rng.random(n), rounds, sample_stream))
    order = layout.members[ranked]
    if streams > 1:
        order = _deal_chunks(order, np.bincount(sample_stream, minlength=streams), chunk)
    return order, after


def _deal_chunks(by_stream: np.ndarray, counts: np.ndarray, chunk: int) -> np.ndarray:
    """``by_stream`` (each stream's order, stream after stream, ``counts``
    samples each) as chunks of ``chunk`` samples taken from stream ``c mod
    streams`` for chunk ``c``, or from the next stream with samples left
    once that one is spent."""
    streams = len(counts)
    begin = np.concatenate([[0], np.cumsum(counts)[:-1]])
    taken = np.zeros(streams, dtype=np.int64)
    pieces = []
    c = 0
    while taken.sum() < len(by_stream):
        for step in range(streams):
            k = (c + step) % streams
            if taken[k] < counts[k]:
                break
        else:
            break
        m = min(chunk, int(counts[k] - taken[k]))
        at = int(begin[k] + taken[k])
        pieces.append(by_stream[at : at + m])
        taken[k] += m
        c += 1
    return np.concatenate(pieces) if pieces else by_stream[:0]


class ReadPlan:
    """What a dataset fetches ahead under one epoch's locality order (see
    "Read ahead" in the module doc): :meth:`spans_for` a batch of sample
    indices gives the spans, as ``Image.will_read`` takes them, of the
    groups the batch starts and of the groups that follow, in their slots,
    the groups the batch is half through; each is asked for once per plan
    (the plan remembers, in the process that holds it, what it asked)."""

    def __init__(self, layout: Layout, after: np.ndarray, streams: int = 1) -> None:
        if layout.lengths is None:
            raise ValueError("a read plan needs the samples' lengths (a layout from the image)")
        n = len(layout.members)
        lo, hi = layout.bounds[:-1], layout.bounds[1:]
        self.group_of = np.empty(n, dtype=np.int64)
        self.group_of[layout.members] = np.repeat(np.arange(layout.groups), hi - lo)
        # A slot reads its group's members in order: a sample's place there
        # says how far through the group its slot is.
        self.place = np.empty(n, dtype=np.int64)
        self.place[layout.members] = np.arange(n) - np.repeat(lo, hi - lo)
        self.half = (hi - lo) // 2
        keys = layout.keys[layout.members]
        ends = keys + layout.lengths[layout.members]
        spans = np.zeros((layout.groups, 3), dtype="<u8")
        if layout.groups:
            if layout.parts is not None:
                spans[:, 0] = layout.parts[layout.members][lo]
            # A group starts at its first sample (the members are sorted by
            # position) and ends where its furthest-reaching sample ends, or
            # at the end of its aligned span if that is sooner: the last
            # sample of a group usually runs a few KiB into the next span,
            # and asking for them would fetch that span's whole range (a
            # remote image fetches aligned ranges) long before its own group
            # comes, to be evicted by then and fetched again. Those few KiB
            # are read when their sample is, as a small piece.
            cap = (keys[lo] // layout.group_bytes + 1) * layout.group_bytes
            spans[:, 1] = keys[lo]
            spans[:, 2] = np.minimum(np.maximum.reduceat(ends, lo), cap) - keys[lo]
        self.spans = spans
        self.after = np.asarray(after, dtype=np.int64)
        #: Streams of the order: each worker reads its own (module doc).
        self.streams = streams
        self._seen = np.zeros(layout.groups, dtype=bool)
        self._followed = np.zeros(layout.groups, dtype=bool)

    def spans_for(self, indices: np.ndarray, share: tuple[int, int] = (0, 1)) -> bytes:
        """Little-endian ``(part, offset, length)`` triples to fetch before
        reading ``indices`` (empty when every group was asked for).

        ``share`` is ``(worker, workers)`` when the processes reading the
        epoch share what they fetch (a node-local disk cache): each reads
        ahead only the next groups it owns (group number modulo
        ``workers``), and finds the others' on disk when it gets to them,
        so that the storage serves each region once, not once per worker.
        An order dealt in streams needs no share: a worker's next groups
        are its own stream's, which no other worker reads."""
        indices = np.asarray(indices, dtype=np.int64)
        groups = self.group_of[indices]
        new = np.unique(groups[~self._seen[groups]])
        self._seen[new] = True
        halfway = groups[self.place[indices] >= self.half[groups]]
        halfway = np.unique(halfway[~self._followed[halfway]])
        self._followed[halfway] = True
        nxt = self.after[halfway]
        nxt = nxt[nxt >= 0]
        worker, workers = share
        if workers > 1 and self.streams == 1:
            nxt = nxt[nxt % workers == worker]
        if not len(new) and not len(nxt):
            return b""
        return self.spans[np.concatenate([new, nxt])].tobytes()


def rank_share(
    order: np.ndarray, start: int, rank: int, world_size: int, drop_last: bool
) -> np.ndarray:
    """What ``rank`` takes of ``order[start:]``: every ``world_size``-th
    position from its own, the rest padded with its first positions (as
    torch's DistributedSampler pads) or cut (``drop_last``) to a multiple of
    ``world_size``."""
    rest = order[start:]
    if drop_last:
        rest = rest[: len(rest) // world_size * world_size]
    elif len(rest) % world_size:
        pad = world_size - len(rest) % world_size
        rest = np.concatenate([rest, np.resize(rest, pad)]) if len(rest) else rest
    return rest[rank::world_size]


def share_len(remaining: int, world_size: int, drop_last: bool) -> int:
    """``len(rank_share(...))`` without building it."""
    if drop_last:
        return remaining // world_size
    return -(-remaining // world_size)


def _rng(seed: int, epoch: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch])))
