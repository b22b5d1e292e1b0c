"""packfs.torch.ShuffleSampler: one order per (seed, epoch), split by rank
so that a global step holds the same samples at any world size, resumed
exactly (at the same or another world size), with a locality order that
keeps batches mixed; then in real DataLoaders and a real two-process
torch.distributed job that is killed mid-epoch and resumed at one process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pytest

import packfs
import packfs.torch
from conftest import REPO, free_port, need, pack, wait_port
from packfs import _sampler
from packfs.torch import ShuffleSampler

try:
    import torch
    from torch.utils.data import DataLoader
except ImportError:  # scripts/python_tests.sh installs torch
    torch = None


class Laid:
    """A dataset of ``n`` samples in ``classes`` classes, class after class
    in the image, ``size`` bytes each (a shard per ``per_part`` samples)."""

    def __init__(self, n: int, classes: int = 10, size: int = 20_000, per_part: int | None = None):
        self.n, self.size, self.per_part = n, size, per_part
        self.targets = np.arange(n) * classes // n

    def __len__(self) -> int:
        return self.n

    def layout(self):
        keys = np.arange(self.n, dtype=np.int64) * self.size
        parts = None if self.per_part is None else np.arange(self.n) // self.per_part
        return keys, np.full(self.n, self.size), parts


def class_tree(tree, classes: int, per_class: int, data, suffix: str = ""):
    """``tree/c{c}/{i:03d}{suffix}`` holding ``data(c, i)``."""
    for c in range(classes):
        (tree / f"c{c}").mkdir(parents=True)
        for i in range(per_class):
            (tree / f"c{c}" / f"{i:03d}{suffix}").write_bytes(data(c, i))
    return tree


def take(sampler) -> list[int]:
    return list(iter(sampler))


@pytest.mark.parametrize("locality", [True, False])
def test_one_order_per_seed_and_epoch_with_every_sample_once(locality):
    ds = Laid(5_000)
    a = ShuffleSampler(ds, seed=3, locality=locality)
    b = ShuffleSampler(ds, seed=3, locality=locality)
    first = take(a)
    assert sorted(first) == list(range(5_000))
    assert first == take(b) == take(a)  # and again without set_epoch
    a.set_epoch(1)
    second = take(a)
    assert sorted(second) == list(range(5_000)) and second != first
    assert take(ShuffleSampler(ds, seed=4, locality=locality)) != first
    # A shuffle, not the identity or a rotation of it.
    assert sum(x + 1 == y for x, y in zip(first, first[1:])) < 500


@pytest.mark.parametrize("locality", [True, False])
def test_a_global_step_holds_the_same_samples_at_every_world_size(locality):
    ds, step = Laid(4_096), 64  # batch size times world size
    steps = {}
    for world in (1, 2, 4):
        shares = [take(ShuffleSampler(ds, seed=9, rank=r, world_size=world, locality=locality)) for r in range(world)]
        batch = step // world
        steps[world] = [
            sorted(x for share in shares for x in share[s * batch : (s + 1) * batch]) for s in range(4_096 // step)
        ]
    assert steps[1] == steps[2] == steps[4]


def test_len_and_padding_as_distributed_sampler():
    ds = Laid(10)
    shares = [take(ShuffleSampler(ds, rank=r, world_size=4, locality=False)) for r in range(4)]
    assert [len(s) for s in shares] == [3, 3, 3, 3] == [len(ShuffleSampler(ds, rank=r, world_size=4)) for r in range(4)]
    counts = Counter(x for s in shares for x in s)
    assert set(counts) == set(range(10)) and sum(counts.values()) == 12
    dropped = [take(ShuffleSampler(ds, rank=r, world_size=4, drop_last=True)) for r in range(4)]
    assert [len(s) for s in dropped] == [2] * 4 and len({x for s in dropped for x in s}) == 8
    assert len(ShuffleSampler(ds, rank=0, world_size=4, drop_last=True)) == 2


@pytest.mark.parametrize("locality", [True, False])
def test_a_loaded_state_continues_the_epoch_exactly(locality):
    ds = Laid(3_000)
    s = ShuffleSampler(ds, seed=1, locality=locality)
    s.set_epoch(5)
    it = iter(s)
    head = [next(it) for _ in range(1_234)]
    state = json.loads(json.dumps(s.state_dict()))  # a checkpoint is plain data
    rest = list(it)
    r = ShuffleSampler(ds, locality=locality)
    r.load_state_dict(state)
    assert r.epoch == 5 and r.seed == 1 and len(r) == 3_000 - 1_234
    assert take(r) == rest and head + rest == take(s)
    # After the resumed epoch, the sampler starts the next one whole.
    r.set_epoch(6)
    assert len(take(r)) == 3_000


def test_set_epoch_at_the_top_of_the_resumed_epoch_keeps_the_loaded_position():
    # Bug: set_epoch always restarted its epoch, so the usual training loop
    # (load the checkpoint, then `for e in range(start, n): set_epoch(e)`)
    # silently gave the resumed epoch again from its start.
    ds = Laid(2_000)
    s = ShuffleSampler(ds, seed=3)
    s.set_epoch(4)
    it = iter(s)
    head = [next(it) for _ in range(700)]
    state = s.state_dict()
    r = ShuffleSampler(ds)
    r.load_state_dict(state)
    r.set_epoch(4)
    assert head + take(r) == take(s)
    # Once that epoch has run, set_epoch of it starts it whole again, and
    # another epoch after a load starts whole too.
    r.set_epoch(4)
    assert take(r) == take(s)
    r.load_state_dict(state)
    r.set_epoch(5)
    assert len(take(r)) == 2_000


@pytest.mark.parametrize("locality", [True, False])
@pytest.mark.parametrize("before, after", [(2, 3), (4, 1), (1, 2), (3, 3)])
def test_a_state_saved_at_one_world_size_loads_at_another(locality, before, after):
    n, seen = 6_000, 500  # samples each old rank consumed
    ds = Laid(n)
    old = [ShuffleSampler(ds, seed=2, rank=r, world_size=before, locality=locality) for r in range(before)]
    consumed = [x for s in old for x in take(s)[:seen]]
    states = [s.state_dict(samples_seen=seen) for s in old]
    assert all(st == states[0] for st in states)  # every rank saves the same
    new = [ShuffleSampler(ds, rank=r, world_size=after, locality=locality) for r in range(after)]
    for s in new:
        s.load_state_dict(states[0])
    rest = [x for s in new for x in take(s)]
    counts = Counter(consumed + rest)
    assert set(counts) == set(range(n))
    # Each sample once, but the padding to a multiple of the new world size.
    assert sum(counts.values()) - n == len(rest) - (n - before * seen) < after


def test_a_state_of_another_dataset_or_order_is_refused():
    s = ShuffleSampler(Laid(100))
    with pytest.raises(ValueError, match="100 samples, this one has 99"):
        ShuffleSampler(Laid(99)).load_state_dict(s.state_dict())
    with pytest.raises(ValueError, match="locality=True"):
        ShuffleSampler(Laid(100), locality=False).load_state_dict(s.state_dict())
    with pytest.raises(ValueError, match="rank 2 is not in 0..1"):
        ShuffleSampler(Laid(100), rank=2, world_size=2)


def test_locality_keeps_batches_mixed_and_reads_moving_forward():
    ds = Laid(30_000, classes=100, size=19_000)  # the JPEG set's shape
    window, group = 64, 4 << 20
    order = np.array(take(ShuffleSampler(ds, seed=5, window=window, group_bytes=group)))
    uniform = np.array(take(ShuffleSampler(ds, seed=5, locality=False)))

    def mixing(o):
        b = ds.targets[o[: len(o) // 64 * 64]].reshape(-1, 64)
        return np.mean([len(np.unique(r)) for r in b])

    assert mixing(order) >= 0.9 * mixing(uniform), (mixing(order), mixing(uniform))
    # Each round of `window` samples takes one of every slot: `window`
    # different groups (the last rounds of an epoch, with fewer groups
    # left, aside).
    sampler = ShuffleSampler(ds, seed=5, window=window, group_bytes=group)
    sampler.order()
    layout = sampler._layout
    group_of = np.empty(len(ds), dtype=np.int64)
    for g in range(layout.groups):
        group_of[layout.members[layout.bounds[g] : layout.bounds[g + 1]]] = g
        assert ds.size * (layout.bounds[g + 1] - layout.bounds[g] - 1) < group
    groups = group_of[order]
    # Slots run out within a group's length of each other.
    body = groups[: len(groups) - int(np.diff(layout.bounds).max()) * window]
    assert len(body) > len(ds) // 3
    for i in range(0, len(body) - window, window):
        assert len(set(body[i : i + window])) == window
    # Within a group, samples come in the image's order.
    last = {}
    for x, g in zip(order.tolist(), groups.tolist()):
        assert last.get(g, -1) < x
        last[g] = x
    # A uniform order has neither property.
    ugroups = group_of[uniform]
    assert any(len(set(ugroups[i : i + window])) < window for i in range(0, 10 * window, window))


def groups_of(sampler) -> np.ndarray:
    """Each sample's group in ``sampler``'s layout."""
    sampler.order()
    layout = sampler._layout
    group_of = np.empty(len(layout.members), dtype=np.int64)
    group_of[layout.members] = np.repeat(np.arange(layout.groups), np.diff(layout.bounds))
    return group_of


def test_streams_give_each_global_step_to_one_worker_with_batches_still_mixed():
    ds = Laid(30_000, classes=100, size=19_000)
    workers, batch = 4, 64
    s = ShuffleSampler(ds, seed=5, group_bytes=1 << 20, num_workers=workers, batch_size=batch)
    order = np.array(take(s))
    assert sorted(order.tolist()) == list(range(len(ds)))
    group_of = groups_of(s)
    # Which stream holds each group: the one whose steps read it first.
    steps = order[: len(order) // batch * batch].reshape(-1, batch)
    stream = {}
    for c, step in enumerate(steps):
        for g in set(group_of[step].tolist()):
            stream.setdefault(g, c % workers)
    # Until the streams run out (within a group of each other), step c reads
    # only stream c mod workers' groups: the same worker reads them all.
    largest = int(np.diff(s._layout.bounds).max())
    body = len(steps) - workers * (largest // batch + 2)
    assert body > len(steps) * 3 // 4
    for c in range(body):
        assert {stream[g] for g in group_of[steps[c]].tolist()} == {c % workers}, c
    # Each step still draws from `window` regions: as mixed as before.
    uniform = np.array(take(ShuffleSampler(ds, seed=5, locality=False)))

    def mixing(o):
        b = ds.targets[o[: len(o) // 64 * 64]].reshape(-1, 64)
        return np.mean([len(np.unique(r)) for r in b])

    assert mixing(order) >= 0.9 * mixing(uniform), (mixing(order), mixing(uniform))
    # The same global batch at another world size gives the same steps.
    halves = [
        take(ShuffleSampler(ds, seed=5, group_bytes=1 << 20, num_workers=workers, batch_size=32, rank=r, world_size=2))
        for r in range(2)
    ]
    for c in range(len(steps)):
        assert sorted(halves[0][c * 32 : (c + 1) * 32] + halves[1][c * 32 : (c + 1) * 32]) == sorted(steps[c])
    # One worker, or none, is the plain locality order.
    plain = take(ShuffleSampler(ds, seed=5, group_bytes=1 << 20))
    assert take(ShuffleSampler(ds, seed=5, group_bytes=1 << 20, num_workers=1, batch_size=batch)) == plain
    assert order.tolist() != plain


def test_a_state_resumes_in_the_streams_it_was_saved_in():
    ds, seen = Laid(6_000), 640
    old = [ShuffleSampler(ds, seed=2, rank=r, world_size=2, num_workers=4, batch_size=32) for r in range(2)]
    for s in old:
        s.set_epoch(3)
    consumed = [x for s in old for x in take(s)[:seen]]
    state = json.loads(json.dumps(old[0].state_dict(samples_seen=seen)))
    assert (state["streams"], state["chunk"]) == (4, 64)
    # One rank, two workers: another dealing, but the epoch goes on in the saved one.
    new = ShuffleSampler(ds, num_workers=2, batch_size=64)
    new.load_state_dict(state)
    new.set_epoch(3)
    rest = take(new)
    assert sorted(consumed + rest) == list(range(len(ds)))
    order = old[0].order().tolist()
    assert sorted(consumed) == sorted(order[: 2 * seen]) and rest == order[2 * seen :]
    # The next epoch is dealt for this sampler's own workers.
    new.set_epoch(4)
    mine = ShuffleSampler(ds, seed=2, num_workers=2, batch_size=64)
    mine.set_epoch(4)
    assert take(new) == take(mine)
    # A state saved before streams existed resumes in one stream.
    plain = ShuffleSampler(ds, seed=2)
    plain.set_epoch(3)
    head = take(plain)[:1_000]
    old_state = plain.state_dict(samples_seen=1_000)
    del old_state["streams"], old_state["chunk"]
    again = ShuffleSampler(ds, num_workers=4, batch_size=64)
    again.load_state_dict(old_state)
    assert head + take(again) == plain.order().tolist()


def test_streams_need_the_batch_size():
    with pytest.raises(ValueError, match="num_workers needs batch_size"):
        ShuffleSampler(Laid(100), num_workers=2)
    with pytest.raises(ValueError, match="batch_size must be positive"):
        ShuffleSampler(Laid(100), num_workers=2, batch_size=0)


def test_groups_never_span_two_shards():
    ds = Laid(1_000, per_part=250, size=1 << 20)
    s = ShuffleSampler(ds, group_bytes=10 << 20)
    s.order()
    layout = s._layout
    parts = ds.layout()[2]
    for g in range(layout.groups):
        members = layout.members[layout.bounds[g] : layout.bounds[g + 1]]
        assert len(set(parts[members].tolist())) == 1
        assert len(members) <= 10


class Planned(Laid):
    """A ``Laid`` dataset that takes a read plan, as ImageFolder does."""

    plan = None

    def set_read_plan(self, plan):
        self.plan = plan


def test_a_read_plan_fetches_each_group_whole_before_its_samples_and_the_next_one_ahead():
    ds = Planned(3_000, size=9_000, per_part=1_000)
    sampler = ShuffleSampler(ds, seed=3, window=8, group_bytes=1 << 20)
    order, plan, layout = sampler.order(), ds.plan, sampler._layout
    assert plan is not None
    # Each group's successor starts after the group's last sample; every
    # group but the slots' first ones follows exactly one other.
    first = {}
    last = {}
    for pos, g in enumerate(plan.group_of[order].tolist()):
        first.setdefault(g, pos)
        last[g] = pos
    nxt = plan.after
    followed = nxt[nxt >= 0]
    assert len(set(followed.tolist())) == len(followed) == layout.groups - 8
    for g, h in enumerate(nxt.tolist()):
        if h >= 0:
            assert first[h] > last[g]
    # Read in batches of 16: a group's span, covering its samples' bytes
    # within its aligned span, is asked for no later than its first sample's batch, once, and
    # the group after it by the time the group's last sample is read, but
    # not while its first half is.
    keys, lengths, parts = ds.layout()
    asked: dict = {}
    halfway: dict = {}
    for b, i in enumerate(range(0, len(order), 16)):
        batch = order[i : i + 16]
        raw = np.frombuffer(plan.spans_for(batch), dtype="<u8").reshape(-1, 3)
        for part, off, length in raw.tolist():
            asked.setdefault((part, off, length), b)
        for x in batch.tolist():
            g = int(plan.group_of[x])
            span = tuple(int(v) for v in plan.spans[g])
            assert asked.get(span, b + 1) <= b
            # Up to the end of the group's aligned span: a sample that runs
            # into the next one is read there as a piece, not its range.
            cap = (span[1] // (1 << 20) + 1) * (1 << 20)
            assert span[0] == parts[x] and span[1] <= keys[x] and span[1] + span[2] <= cap
            assert min(keys[x] + lengths[x], cap) <= span[1] + span[2]
            if nxt[g] >= 0:
                following = tuple(int(v) for v in plan.spans[nxt[g]])
                if x == layout.members[layout.bounds[g + 1] - 1]:
                    assert following in asked
                if plan.place[x] >= plan.half[g]:
                    halfway.setdefault(g, b)
    assert len(asked) == layout.groups
    for g, h in enumerate(nxt.tolist()):
        if h >= 0:
            assert asked[tuple(int(v) for v in plan.spans[h])] == halfway[g]
    # Workers sharing a disk cache split the groups read ahead: each next
    # group is asked for ahead of its first batch by one worker of two (the
    # other asks when it gets there, and finds it on disk).
    first_batch = {}
    for b, i in enumerate(range(0, len(order), 16)):
        for g in plan.group_of[order[i : i + 16]].tolist():
            first_batch.setdefault(tuple(int(v) for v in plan.spans[g]), b)
    ahead = [set(), set()]
    for w in range(2):
        shared = _sampler.ReadPlan(layout, plan.after)
        for b, i in enumerate(range(0, len(order), 16)):
            raw = np.frombuffer(shared.spans_for(order[i : i + 16], (w, 2)), dtype="<u8")
            ahead[w] |= {t for t in map(tuple, raw.reshape(-1, 3).tolist()) if first_batch[t] > b}
    nexts = {tuple(int(v) for v in plan.spans[h]) for h in nxt[nxt >= 0]}
    assert not ahead[0] & ahead[1]
    assert ahead[0] | ahead[1] == {t for t in nexts if first_batch[t] > 0}
    # Asked once: the same batches again ask for nothing.
    assert plan.spans_for(order[:16]) == b""
    # A new epoch gives a new plan; no locality or read_ahead=False none.
    sampler.set_epoch(1)
    assert ds.plan is not plan and not ds.plan._seen.any()
    for kw in ({"locality": False}, {"read_ahead": False}):
        quiet = Planned(100)
        ShuffleSampler(quiet, **kw)
        assert quiet.plan is None


def test_read_ahead_fetches_a_remote_image_in_whole_ranges(tmp_path, packfs_bin):
    """An image larger than its range cache is read by pieces when reads
    look random; with the read plan each group arrives as whole ranges,
    one request each, and the bytes served are the same."""
    tree = class_tree(tmp_path / "tree", 8, 100, lambda c, i: os.urandom(30_000), ".bin")
    srv = tmp_path / "srv"
    srv.mkdir()
    img = pack(packfs_bin, tree, srv / "img.sqfs")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "range_server.py"), "--root", str(srv), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    rs = 256 << 10
    try:
        wait_port(port, proc, "range_server.py")
        gets = {}
        for read_ahead in (True, False):
            image = packfs.Image(f"http://127.0.0.1:{port}/img.sqfs", range_size=rs, range_cache=16 << 20)
            ds = packfs.torch.ImageFolder(image)
            sampler = ShuffleSampler(ds, seed=1, group_bytes=rs, window=16, read_ahead=read_ahead)
            order = list(sampler)
            got = []
            for i in range(0, len(order), 16):
                got += [data for data, _ in ds.__getitems__(order[i : i + 16])]
            want = [(tree / ds.path(i)).read_bytes() for i in order]
            assert got == want
            gets[read_ahead] = image.stats()["get_requests"]
            image.close()
    finally:
        proc.terminate()
        proc.wait(10)
    ranges = -(-img.stat().st_size // rs)
    assert img.stat().st_size > 16 << 20  # larger than the cache: pieces
    assert gets[True] <= ranges * 3 // 2 + 4, gets
    assert gets[False] >= 2 * gets[True], gets


# --- with torch ----------------------------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory, packfs_bin):
    need(torch is not None, "torch is not installed (scripts/python_tests.sh installs it)")
    root = tmp_path_factory.mktemp("sampled")
    data = lambda c, i: os.urandom(3_000 + 97 * i) + f"{c}/{i}".encode()  # noqa: E731
    tree = class_tree(root / "tree", 5, 40, data, ".bin")
    return pack(packfs_bin, tree, root / "sampled.sqfs")


def collate(batch):
    return batch


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_in_a_dataloader_with_workers(folder, method):
    ds = packfs.torch.ImageFolder(packfs.Image(folder))
    sampler = ShuffleSampler(ds, seed=11)
    dl = DataLoader(
        ds, batch_size=16, sampler=sampler, num_workers=2, multiprocessing_context=method, collate_fn=collate
    )
    sampler.set_epoch(1)
    got = [data for batch in dl for data, _ in batch]
    assert len(got) == len(ds) == 200
    assert sorted(got) == sorted(ds[i][0] for i in range(len(ds)))
    # The loader follows the sampler's order.
    assert got == [ds[i][0] for i in sampler.order().tolist()]


def worker_collate(batch):
    from torch.utils.data import get_worker_info

    return get_worker_info().id, [data for data, _ in batch]


def test_with_streams_each_worker_reads_its_own_regions(tmp_path, packfs_bin):
    need(torch is not None, "torch is not installed (scripts/python_tests.sh installs it)")
    data = lambda c, i: os.urandom(9_000) + f"{c}/{i}".encode()  # noqa: E731
    image = pack(packfs_bin, class_tree(tmp_path / "tree", 8, 100, data), tmp_path / "wide.sqfs")
    ds = packfs.torch.ImageFolder(packfs.Image(image), loader=packfs.torch.raw_loader)
    workers, batch = 2, 16
    sampler = ShuffleSampler(ds, seed=4, group_bytes=64 << 10, window=8, num_workers=workers, batch_size=batch)
    dl = DataLoader(ds, batch_size=batch, sampler=sampler, num_workers=workers, collate_fn=worker_collate)
    got = list(dl)
    order = sampler.order().tolist()
    assert [d for _, datas in got for d in datas] == [ds[i][0] for i in order]
    group_of = groups_of(sampler)
    read_by = [set(), set()]
    largest = int(np.diff(sampler._layout.bounds).max())
    body = len(got) - workers * (largest // batch + 2)
    assert body > len(got) * 3 // 4
    for c, (worker, _) in enumerate(got[:body]):
        assert worker == c % workers
        read_by[worker] |= set(group_of[order[c * batch : (c + 1) * batch]].tolist())
    assert read_by[0] and read_by[1] and not read_by[0] & read_by[1]


DDP_RANK = textwrap.dedent(
    """
    import json, os, sys, time
    import torch.distributed as dist
    import packfs, packfs.torch
    image, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dist.init_process_group("gloo")
    ds = packfs.torch.ImageFolder(packfs.Image(image))
    sampler = packfs.torch.ShuffleSampler(ds, seed=7)  # rank and world from torch.distributed
    assert (sampler.rank, sampler.world_size) == (dist.get_rank(), dist.get_world_size())
    state = os.environ.get("STATE")
    if state:
        sampler.load_state_dict(json.load(open(state)))
    else:
        sampler.set_epoch(3)
    seen, batch = 0, 8
    with open(f"{out}.{dist.get_rank()}", "w") as f:
        it = iter(sampler)
        while True:
            idx = [i for _, i in zip(range(batch), it)]
            if not idx:
                break
            ds.__getitems__(idx)
            f.write("".join(f"{i}\\n" for i in idx))
            f.flush()
            seen += len(idx)
            dist.barrier()  # ranks in lockstep, as DDP's gradient all-reduce keeps them
            if seen == steps * batch and dist.get_rank() == 0:
                json.dump(sampler.state_dict(samples_seen=seen), open(f"{out}.state.tmp", "w"))
                os.rename(f"{out}.state.tmp", f"{out}.state")
            if seen == steps * batch and os.environ.get("DIE_AFTER_CHECKPOINT"):
                dist.barrier()
                print("checkpointed", flush=True)
                time.sleep(600)  # killed here
    dist.destroy_process_group()
    """
)


def test_a_two_process_job_killed_mid_epoch_resumes_at_one_process(folder, tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(DDP_RANK)
    out = tmp_path / "seen"
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", WORLD_SIZE="2", DIE_AFTER_CHECKPOINT="1")
    env["MASTER_PORT"] = str(29_500 + os.getpid() % 1_000)
    ranks = [
        subprocess.Popen(
            [sys.executable, str(script), str(folder), str(out), "5"],
            env=dict(env, RANK=str(r)),
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for r in range(2)
    ]
    try:
        for p in ranks:
            assert p.stdout.readline().strip() == "checkpointed"
    finally:
        for p in ranks:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    state = json.loads((tmp_path / "seen.state").read_text())
    before = [int(x) for r in range(2) for x in (tmp_path / f"seen.{r}").read_text().split()]
    assert len(before) == 2 * 5 * 8 and state["position"] == 80
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", WORLD_SIZE="1", RANK="0", STATE=str(tmp_path / "seen.state"))
    env["MASTER_PORT"] = str(30_500 + os.getpid() % 1_000)
    out2 = tmp_path / "resumed"
    subprocess.run([sys.executable, str(script), str(folder), str(out2), "0"], env=env, check=True, timeout=300)
    after = [int(x) for x in (tmp_path / "resumed.0").read_text().split()]
    assert sorted(before + after) == list(range(200))


# --- where samples lie: Image.locate and ImageFolder.layout ---------------


def test_locate_points_at_the_stored_bytes(tmp_path, packfs_bin):
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    files = {f"d/{i:02d}.bin": os.urandom(5_000 + 3_001 * i) for i in range(12)}
    for name, data in files.items():
        (tree / name).write_bytes(data)
    # SquashFS, 4 KiB blocks: random data is stored raw, so a file's full
    # blocks are its bytes at its offset; files follow in path order.
    sq = tmp_path / "t.sqfs"
    subprocess.run([packfs_bin, "pack", str(tree), "-o", str(sq), "-q", "-b", "4K"], check=True)
    raw = sq.read_bytes()
    img = packfs.Image(sq)
    offsets = []
    for name, data in sorted(files.items()):
        e = img.locate(name)
        assert isinstance(e, packfs.Extent) and e.part == 0
        full = len(data) // 4096 * 4096
        assert raw[e.offset : e.offset + full] == data[:full], name
        assert e.length == len(data)  # raw blocks plus a tail at its length
        offsets.append(e.offset)
    assert offsets == sorted(offsets)
    # ZIP, stored: the local record, then the name and extra, then the data.
    z = tmp_path / "t.zip"
    subprocess.run([packfs_bin, "pack", str(tree), "-o", str(z), "-q", "-l", "0"], check=True)
    raw = z.read_bytes()
    zimg = packfs.Image(z)
    for name, data in files.items():
        e = zimg.locate(name)
        assert raw[e.offset : e.offset + 4] == b"PK\x03\x04"
        n, m = int.from_bytes(raw[e.offset + 26 : e.offset + 28], "little"), int.from_bytes(
            raw[e.offset + 28 : e.offset + 30], "little"
        )
        assert raw[e.offset + 30 + n + m :][: len(data)] == data and e.length == len(data)
    with pytest.raises(IsADirectoryError):
        img.locate("d")
    with pytest.raises(FileNotFoundError):
        img.locate("d/nope")


def test_shards_are_parts_and_a_folder_layout_is_locate(tmp_path, packfs_bin):
    tree = class_tree(tmp_path / "tree", 4, 30, lambda c, i: os.urandom(2_000))
    out = tmp_path / "s-{shard}.sqfs"
    subprocess.run([packfs_bin, "pack", str(tree), "-o", str(out), "-q", "--shards", "3"], check=True)
    img = packfs.Image(tmp_path / "s.manifest.json")
    ds = packfs.torch.ImageFolder(img)
    offsets, lengths, parts = ds.layout()
    assert len(offsets) == len(ds) == 120
    assert set(parts.tolist()) == {0, 1, 2}
    for i in range(0, 120, 7):
        assert tuple(img.locate(ds.path(i))) == (parts[i], offsets[i], lengths[i])
    # Groups of the locality order never cross a shard.
    s = ShuffleSampler(ds, group_bytes=1 << 20)
    assert sorted(take(s)) == list(range(120))
    for g in range(s._layout.groups):
        members = s._layout.members[s._layout.bounds[g] : s._layout.bounds[g + 1]]
        assert len(set(parts[members].tolist())) == 1
