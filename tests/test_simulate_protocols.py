"""Every adaptcoll protocol in the simulator: the ring and recursive-halving allreduces on real data over
every size 1..17 (fair and FIFO links, shared nodes, noise), their plans as the decision layer makes them,
and calls without a segment, which run what the shipped rule chooses and say so."""

from __future__ import annotations

import json

import pytest

from adaptcoll.plans.segments import plan_blocks
from adaptcoll.protocols.algorithms import ALLREDUCE_ALGORITHMS
from adaptcoll.runtime import settings
from adaptcoll.simulate import cli
from adaptcoll.simulate.choice import choose, rule_facts
from adaptcoll.simulate.lockstep import NotModelled, baseline_names, check_applicable, estimated_messages
from adaptcoll.simulate.noise_setup import parse_noise
from adaptcoll.simulate.params import DEFAULT_PARAMS as P_BUILTIN
from adaptcoll.simulate.params import CostParams
from adaptcoll.simulate.programs import Job, prepare, register_protocol
from adaptcoll.simulate.run import run_once
from adaptcoll.tune.policy import resolve

K, M = 1 << 10, 1 << 20
BLOCK_ALGORITHMS = sorted(ALLREDUCE_ALGORITHMS)


@pytest.mark.parametrize("name", BLOCK_ALGORITHMS)
def test_block_allreduces_compute_the_allreduce_at_every_size(name):
    """Real data through the real ring / recursive-halving protocols on 1..17 simulated ranks."""
    noise = parse_noise(["1kHz x 40us, poisson", "skew: uniform:50us"])
    transfers = [CostParams(eager=2048), CostParams(eager=2048, links="fifo"), CostParams(ranks_per_node=3)]
    for size in range(1, 18):
        for i, count in enumerate((1, size * 7 + 3, 3000 + size)):
            job = Job("allreduce", size, 4 * count, 256, f"{name}:max_segments=0", settings.Settings())
            _, world, bufs = run_once(
                job, transfers[(size + i) % 3], noise=noise if i == 1 else None, seed=size, data=True
            )
            bufs.check()
            assert world.unmatched == 0, (name, size, count)


@pytest.mark.parametrize("name", BLOCK_ALGORITHMS)
def test_block_plans_follow_the_decision_layer(name):
    """The plan: blocks per the algorithm, the setting's parameters over the job's segment, the algorithm's
    own segment cap unless ADAPTCOLL_MAX_SEGMENTS is explicit."""
    algorithm = ALLREDUCE_ALGORITHMS[name]
    count, p = 1 << 20, 12
    job = Job("allreduce", p, 4 * count, 64 * K, name, settings.Settings())
    got = prepare(job).plan
    want = plan_blocks(
        count, 4, 64 * K, algorithm.blocks(p), 0, 1 << 30, algorithm.max_segments, algorithm.tags_per_segment
    )
    assert (got.nseg, got.seg_count) == (want.nseg, want.seg_count)
    capped = prepare(
        Job("allreduce", p, 4 * count, 64 * K, name, settings.Settings(max_segments=1, explicit=("max_segments",)))
    )
    assert capped.plan.nseg <= algorithm.blocks(p)
    by_param = prepare(Job("allreduce", p, 4 * count, 64 * K, f"{name}:segment_size=256K", settings.Settings()))
    assert by_param.plan.nseg < got.nseg
    assert prepare(job).protocol == name and prepare(job).trees == ()


def test_a_protocol_without_parameters_rejects_them_and_unknown_names_list_the_protocols():
    register_protocol("bcast", "noparams_test", lambda j: j.on_complete())
    with pytest.raises(ValueError, match="takes no parameters"):
        prepare(Job("bcast", 4, 4096, 512, "noparams_test:x=1", settings.Settings()))
    with pytest.raises(ValueError, match="registered for allreduce: rabenseifner, ring"):
        prepare(Job("allreduce", 4, 4096, 512, "rings", settings.Settings()))


@pytest.mark.parametrize(
    "collective,ranks,nbytes",
    [("bcast", 1024, 16 * M), ("reduce", 64, 4 * M), ("allreduce", 16 * K, 4 * M), ("bcast", 9, 64 * K)],
)
def test_without_a_segment_the_shipped_rule_chooses(collective, ranks, nbytes):
    """segment 0: the plan, algorithm and cap are the rule's for that call (the library's own resolution)."""
    cfg = settings.Settings()
    prep = prepare(Job(collective, ranks, nbytes, 0, "", cfg))
    previous = settings.use(cfg)
    try:
        call = resolve(b"", "", rule_facts(ranks, 1), warn=False).choose(collective, nbytes)
    finally:
        settings.use(previous)
    assert prep.protocol == call.algorithm
    assert (prep.choice.segment, prep.choice.max_segments, prep.choice.serve) == (
        call.segment_size,
        call.max_segments,
        call.serve,
    )
    assert prep.choice.source.startswith("rule, case")
    seg_count = max(1, call.segment_size // prep.job.itemsize)
    if call.max_segments == 0 and prep.protocol not in ALLREDUCE_ALGORITHMS:
        assert prep.plan.seg_count == seg_count


def test_the_rule_counts_the_nodes_of_a_declared_topology():
    """With one rank per node in the parameters, a declared topology (a described network's node spec) says
    how the ranks sit on nodes, as the hosts would tell the library: 4 nodes of 8 are the case of several
    ranks per node, not 32 nodes of one; ranks not placed in order are told apart; parameters with several
    ranks per node keep theirs."""
    spec = "node=" + ",".join(str(r // 8) for r in range(32))
    assert rule_facts(32, 1, topology=spec) == rule_facts(32, 8)
    assert rule_facts(32, 1, topology="nodes=4") == rule_facts(32, 8)
    assert (rule_facts(32, 1).nodes, rule_facts(32, 1).ranks_per_node) == (32, 1)
    shuffled = rule_facts(4, 1, topology="node=0,1,0,1")
    assert (shuffled.nodes, shuffled.ranks_per_node, shuffled.in_rank_order) == (2, 2, False)
    assert rule_facts(32, 4, topology=spec).ranks_per_node == 4  # the parameters' placement wins
    assert rule_facts(8, 1, topology="flat") == rule_facts(8, 1)
    for cfg, case in ((settings.Settings(topology=spec), "several nodes"), (settings.Settings(), "one per node")):
        assert case in choose("bcast", 32, 16 * M, 0, cfg).source


def test_engine_compiled_simulates_the_compiled_engines_rule():
    """ADAPTCOLL_ENGINE=compiled: the rule's compiled bands (2 ranks: Reduce served from 64K, native
    below 4M on the Python engine), and the choice says so."""
    python_rule = choose("reduce", 2, 64 * K, 0, settings.Settings())
    compiled_rule = choose("reduce", 2, 64 * K, 0, settings.Settings(engine="compiled"))
    assert not python_rule.serve and compiled_rule.serve
    assert compiled_rule.source == "rule, case '2 ranks, compiled engine'"
    assert python_rule.source == "rule, case '2 ranks'"


def test_explicit_settings_win_over_the_rule():
    cfg = settings.Settings(bcast_algorithm="pipeline", explicit=("bcast_algorithm",))
    choice = choose("bcast", 1024, 16 * M, 0, cfg)
    assert choice.algorithm == "pipeline" and choice.source.startswith("rule")
    assert prepare(Job("bcast", 1024, 16 * M, 0, "binomial", cfg)).protocol == "binomial"  # --algorithm wins


def test_cli_says_what_the_rule_chose(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert cli.main(["--collective", "allreduce", "--ranks", "64", "--size", "4M", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "configuration of the shipped rule" in text and "(rule, case '" in text
    row = json.loads(out.read_text())["results"][0]
    assert row["choice"].endswith(")") and "seg=" in row["choice"]
    assert isinstance(row["library_goes_native"], bool)


@pytest.mark.parametrize(
    "collective,ranks,nbytes",
    [
        ("bcast", 64, 16 * M),
        ("bcast", 1024, 16 * M),
        ("reduce", 64, 4 * M),
        ("reduce", 64, 16 * M),
        ("allreduce", 64, 16 * M),
    ],
)
def test_where_the_scale_rule_serves_it_beats_every_lock_step_baseline(collective, ranks, nbytes):
    """Built-in parameters, quiet: the rule's two_tree pipeline against every lock-step baseline the simulator
    has for the collective that is practical in a test (at most 300k messages: ring allgathers cost p^2,
    Open MPI's small-segment pipelines p x segments; bench/scale_table.py runs them all)."""
    job = Job(collective, ranks, nbytes, 0, "", settings.Settings())
    prep = prepare(job)
    assert prep.choice.serve and prep.protocol == "two_tree" and prep.choice.source.startswith("rule, case '")
    ours = run_once(job, P_BUILTIN, prepared=prep)[0].time_s
    names = []
    for name in baseline_names(collective):
        try:
            check_applicable(name, collective, ranks, job.count)
        except NotModelled:  # an Open MPI rule picks an algorithm the simulator does not model
            continue
        if estimated_messages(name, collective, ranks, job.count) <= 300_000:
            names.append(name)
    assert {"binomial", "ompi_tuned"} & set(names)
    for name in names:
        theirs = run_once(job, P_BUILTIN, name)[0].time_s
        assert ours < theirs, (collective, ranks, name, ours, theirs)


def test_ranks_per_node_option_and_topo_trees_follow_the_simulated_nodes(tmp_path, capsys):
    """--ranks-per-node overrides the parameters; topo trees without ADAPTCOLL_TOPOLOGY take the simulated
    nodes (ranks r // k share a node), and compute the right results there."""
    job = Job("bcast", 12, 9000, 1024, "topo", settings.Settings(max_segments=0))
    prep = prepare(job, ranks_per_node=4)
    (tree,) = prep.trees
    leaders = {0, 4, 8}
    for r in range(12):  # inside a node, every parent is on the same node, except the node leaders'
        parent = tree.parent(r)
        if parent is not None and r not in leaders:
            assert parent // 4 == r // 4, (r, parent)
    bufs = run_once(job, CostParams(ranks_per_node=4, eager=2048), data=True)[2]
    bufs.check()
    with pytest.raises(ValueError, match="--ranks-per-node"):
        prepare(job)
    out = tmp_path / "r.json"
    argv = ["--collective", "bcast", "--ranks", "32", "--size", "1M", "--segment", "64K", "--algorithm", "topo"]
    assert cli.main([*argv, "--ranks-per-node", "8", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["params"]["ranks_per_node"] == 8
    assert cli.main(argv) == 2 and "--ranks-per-node" in capsys.readouterr().err


def test_reduce_scatter_gather_reduces_to_every_root():
    """MPICH's long-message Reduce on real data: every size 1..17, every root (odd, even and excluded ones)."""
    for size in range(1, 18):
        for root in range(size):
            for count in (1, 3 * size + 1, 4099):
                job = Job("reduce", size, 4 * count, 4096, root=root)
                _, world, bufs = run_once(job, CostParams(eager=2048), "reduce_scatter_gather", data=True)
                bufs.check(root)
                assert world.unmatched == 0, (size, root, count)
