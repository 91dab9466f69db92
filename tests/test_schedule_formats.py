"""The topology-description and schedule file formats (adaptcoll.schedule.describe / forest): round trips
and one clear error per kind of bad input. No MPI."""

from __future__ import annotations

import json

import pytest

from adaptcoll.plans import schedule_file as forest
from adaptcoll.schedule import describe


def _two_nodes() -> dict:
    return {
        "format": describe.FORMAT,
        "name": "two nodes",
        "ranks": 4,
        "nodes": [[0, 1], [2, 3]],
        "switches": ["nic0", "nic1"],
        "links": [
            {"from": 0, "to": "nic0", "bandwidth": 25e9, "latency": 2e-7, "both": True},
            {"from": 1, "to": "nic0", "bandwidth": 25e9, "latency": 2e-7, "both": True},
            {"from": 2, "to": "nic1", "bandwidth": 25e9, "latency": 2e-7, "both": True},
            {"from": 3, "to": "nic1", "bandwidth": 25e9, "latency": 2e-7, "both": True},
            {"from": "nic0", "to": "nic1", "bandwidth": 12.5e9, "latency": 1e-6},
            {"from": "nic1", "to": "nic0", "bandwidth": 10e9, "latency": 1e-6},
        ],
    }


def test_description_round_trip() -> None:
    d = describe.from_dict(_two_nodes())
    assert d.vertices() == (0, 1, 2, 3, "nic0", "nic1")
    assert len(d.links) == 10
    assert [ln.dst for ln in d.out_links("nic0")] == [0, 1, "nic1"]
    assert d.node_of() == (0, 0, 1, 1)
    assert d.node_spec() == "node=0,0,1,1"
    no_nodes = {k: v for k, v in _two_nodes().items() if k != "nodes"}
    assert describe.from_dict(no_nodes).node_spec() == ""  # every rank its own node: nothing to set
    again = describe.loads(describe.dumps(d))
    assert again == d
    # the asymmetric pair between the NICs stays two entries, the rank links fold into `both`
    assert len(json.loads(describe.dumps(d))["links"]) == 6


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.update(format="x"), "format"),
        (lambda r: r.update(ranks=0), "ranks: must be >= 1"),
        (lambda r: r["links"].append({"from": 0, "to": "nic9", "bandwidth": 1}), "neither a rank"),
        (lambda r: r["links"].append({"from": 9, "to": 0, "bandwidth": 1}), "neither a rank"),
        (lambda r: r["links"].append({"from": 0, "to": "nic0", "bandwidth": 1}), "a second link"),
        (lambda r: r["links"].append({"from": 0, "to": 2, "bandwidth": 0}), "bandwidth must be"),
        (lambda r: r["links"].append({"from": 0, "to": 2, "bandwidth": 1, "latency": -1}), "latency must be"),
        (lambda r: r["links"].append({"from": 0, "to": 0, "bandwidth": 1}), "to itself"),
        (lambda r: r["links"].append({"from": 0, "to": 3, "bandwidth": 1, "speed": 1}), "unknown keys"),
        (lambda r: r.update(nodes=[[0, 1], [2]]), "every rank exactly once"),
        (lambda r: r.update(switches=["nic0", "nic0"]), "listed twice"),
        (lambda r: r.update(color="red"), "unknown keys"),
    ],
)
def test_description_errors(change, message) -> None:
    raw = _two_nodes()
    change(raw)
    with pytest.raises(describe.DescriptionError, match=message):
        describe.from_dict(raw)


def _schedule() -> dict:
    return {
        "format": forest.FORMAT,
        "collective": "bcast",
        "ranks": 4,
        "topology": "two nodes",
        "forests": [
            {
                "root": 0,
                "bound": {"rate": 5e10},
                "trees": [
                    {"weight": 3, "children": [[1, 2], [], [3], []]},
                    {"weight": 1, "children": [[2], [], [1, 3], []]},
                ],
            }
        ],
    }


def test_schedule_round_trip_and_trees() -> None:
    s = forest.from_dict(_schedule())
    f = s.forest(0)
    assert f.shares() == (0.75, 0.25)
    trees = f.tree_set("x.json")
    assert [t.children(0) for t in trees] == [(1, 2), (2,)]
    assert [t.parent(3) for t in trees] == [2, 2]
    assert trees[1].parent(1) == 2
    assert forest.loads(forest.dumps(s)) == s
    with pytest.raises(forest.ScheduleError, match=r"no forest rooted at rank 2 \(roots: 0\)"):
        s.forest(2)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.update(collective="gather"), "collective"),
        (lambda r: r.update(forests=[]), "non-empty"),
        (lambda r: r["forests"][0].update(root=4), "root: must be a rank"),
        (lambda r: r["forests"].append(dict(r["forests"][0])), "a second forest"),
        (lambda r: r["forests"][0]["trees"][0].update(weight=0), "weight: must be"),
        (lambda r: r["forests"][0]["trees"][0].update(children=[[1], [], [3], []]), "only 2 of 4 ranks reachable"),
        (lambda r: r["forests"][0]["trees"][0].update(children=[[1, 2], [2], [3], []]), "two parents"),
        (lambda r: r["forests"][0]["trees"][0].update(children=[[1, 2], [], [3]]), "each of the 4 ranks"),
        (lambda r: r["forests"][0]["trees"][0].update(children=[[1, 2], [0], [3], []]), "the root"),
    ],
)
def test_schedule_errors(change, message) -> None:
    raw = _schedule()
    change(raw)
    with pytest.raises(forest.ScheduleError, match=message):
        forest.from_dict(raw)
