"""Topology specs, the OS fallback readers, and discover() under MPI (1, 2 and 4 ranks)."""

from __future__ import annotations

import pytest

from adaptcoll.plans import topology
from adaptcoll.plans.topology import Topology, parse
from adaptcoll.state import discovery


def test_parse_counts_uneven() -> None:
    topo = parse("nodes=4", 10)
    assert topo.names == ("nodes",)
    assert topo.groups(0) == ((0, 1, 2), (3, 4, 5), (6, 7), (8, 9))
    topo = parse("nodes=3, sockets=2", 11)
    assert topo.groups(0) == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10))
    assert topo.groups(1) == ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10,))
    assert topo.levels[1] == (0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1)
    assert str(topo) == "Topology(3 nodes, 6 sockets)"


def test_parse_more_groups_than_ranks_and_three_levels() -> None:
    assert parse("nodes=5", 3).groups(0) == ((0,), (1,), (2,))
    topo = parse("node=2;socket=2;numa=2", 8)
    assert [len(topo.groups(i)) for i in range(3)] == [2, 4, 8]


def test_parse_explicit_mapping_and_mixing() -> None:
    topo = parse("node=0,0,1,1,1;socket=0,1,0,0,1", 5)
    assert topo.levels == ((0, 0, 1, 1, 1), (0, 1, 0, 0, 1))
    assert topo.groups(1) == ((0,), (1,), (2, 3), (4,))
    topo = parse("node=1,0,1,0,1,0;cores=2", 6)  # interleaved nodes, each cut in 2 by rank order
    assert topo.groups(0) == ((0, 2, 4), (1, 3, 5))
    assert topo.groups(1) == ((0, 2), (1, 3), (4,), (5,))
    assert parse(topo.spec(), 6) == topo
    assert parse("node=0", 1).levels == ((0,),)


def test_parse_flat() -> None:
    for spec in ("", "  ", "flat", "none"):
        assert parse(spec, 4) == Topology((), ())


@pytest.mark.parametrize(
    "spec,message",
    [
        ("nodes=x", "non-integer"),
        ("nodes=0", "count >= 1"),
        ("0,1,2,3", "before any 'name='"),
        ("node=0,1,0", "lists 3 ids but there are 4 ranks"),
        ("node=0,1,0,-1", "negative id"),
        ("nodes=2,,sockets=2", "empty item"),
        ("nodes=2,nodes=2", "given twice"),
        ("2x=3", "not an identifier"),
    ],
)
def test_parse_errors_name_the_variable(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        parse(spec, 4)
    assert "ADAPTCOLL_TOPOLOGY" in str(info.value) and "nodes=4,sockets=2" in str(info.value)


def test_topology_validation_and_hash() -> None:
    with pytest.raises(ValueError, match="same length"):
        Topology(((0, 0), (0,)), ("a", "b"))
    with pytest.raises(ValueError, match="names"):
        Topology(((0, 0),), ())
    a = Topology([[0, 1]], ["node"])  # lists are normalized to tuples
    assert a == Topology(((0, 1),), ("node",)) and hash(a) == hash(Topology(((0, 1),), ("node",)))
    with pytest.raises(ValueError, match="size must be"):
        parse("nodes=2", 0)


def fake_sysfs(root, packages: dict[int, int], numa: dict[int, str]) -> str:
    for cpu, package in packages.items():
        d = root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{package}\n")
    for node, cpulist in numa.items():
        d = root / "devices" / "system" / "node" / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpulist + "\n")
    (root / "devices" / "system" / "node" / "online").write_text("0-1\n")
    return str(root)


def test_os_readers_on_a_fake_two_socket_machine(tmp_path) -> None:
    sysfs = fake_sysfs(tmp_path, {c: c // 4 for c in range(8)}, {0: "0-1,4-5", 1: "2-3,6-7"})
    assert topology.os_socket_id({0, 3}, sysfs) == 0
    assert topology.os_socket_id({5}, sysfs) == 1
    assert topology.os_socket_id({3, 4}, sysfs) is None  # spans two packages
    assert topology.os_socket_id({9}, sysfs) is None  # unknown CPU
    assert topology.os_numa_id({0, 4, 5}, sysfs) == 0
    assert topology.os_numa_id({6}, sysfs) == 1
    assert topology.os_numa_id({1, 2}, sysfs) is None
    assert topology.os_numa_id({0}, str(tmp_path / "missing")) is None


@pytest.mark.mpi(ranks=[1, 2, 4], timeout=120)
def test_discover_consistent_with_split_type(mpi_ranks: int, monkeypatch) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    assert comm.Get_size() == mpi_ranks
    for sub in (comm, comm.Split(comm.Get_rank() % 2, key=-comm.Get_rank())):  # also a reordered sub-comm
        topo = discovery.discover(sub)
        assert topo.size == sub.Get_size() and topo.names[0] == "node"
        poll = discovery.begin_discover(sub)  # the nonblocking form the collectives' set-up uses
        while (found := poll()) is None:
            pass
        assert found == topo and poll() is found
        assert all(t == topo for t in sub.allgather(topo))  # identical on every rank
        shared = sub.Split_type(MPI.COMM_TYPE_SHARED)
        my_node = sorted(shared.allgather(sub.Get_rank()))
        shared.Free()
        members = [r for r in range(sub.Get_size()) if topo.levels[0][r] == topo.levels[0][sub.Get_rank()]]
        assert members == my_node
        for level in range(1, len(topo.levels)):  # inner levels split node groups, never cross them
            assert len(topo.groups(level)) > len(topo.groups(level - 1))
            assert all(len({topo.levels[0][r] for r in g}) == 1 for g in topo.groups(level))
        monkeypatch.setenv(topology.ENV_VAR, "nodes=2")
        assert discovery.from_env_or_discover(sub) == parse("nodes=2", sub.Get_size())
        monkeypatch.delenv(topology.ENV_VAR)
        assert discovery.from_env_or_discover(sub) == topo
        if sub is not comm:
            sub.Free()


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_discover_frees_its_communicators(mpi_ranks: int) -> None:
    """Hold all but 40 context ids (MPICH has 2048): 100 calls then fail if each leaked a communicator."""
    from mpi4py import MPI

    held = []
    try:
        for _ in range(100_000):  # other MPIs may have far more ids: stop at a bound
            held.append(MPI.COMM_SELF.Dup())
    except MPI.Exception:
        pass
    try:
        for comm in held[-40:]:
            comm.Free()
        del held[-40:]
        for _ in range(100):
            discovery.discover(MPI.COMM_WORLD)
    finally:
        for comm in held:
            comm.Free()
