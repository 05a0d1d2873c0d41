"""Plan dataclasses: JSON round trip, digest, rank lookup, and every check of validate_plan."""
import json

import pytest

from mindspeed_mm.core.fcp.solver import (GroupPlan, InvalidPlanError, Plan, RoundPlan, SolverConfig,
                                          validate_plan)
from solver_fakes import FakeCostModel, FakeTable

COST = FakeCostModel(FakeTable(capacity_tokens=1000, ranks_per_node=4))
LENGTHS = [1500, 300, 200, 900]


def _time(samples, degree, algo="ring"):
    return float(COST.group_time_ms(COST.workload([LENGTHS[i] for i in samples]), degree, algo))


def _plan(rounds_spec, num_ranks=4):
    rounds = []
    for spec in rounds_spec:
        groups = tuple(GroupPlan(tuple(ranks), len(ranks), algo, tuple(samples), _time(samples, len(ranks), algo))
                       for ranks, samples, algo in spec)
        rounds.append(RoundPlan(groups, max(g.predicted_ms for g in groups)))
    total = sum(r.predicted_ms for r in rounds)
    return Plan(tuple(rounds), total, total / 2, 1.25, num_ranks)


GOOD = [[((0, 1), (0,), "ring"), ((2,), (1, 2), "ring"), ((3,), (3,), "ring")]]


def test_json_round_trip_and_schema():
    plan = _plan(GOOD)
    data = json.loads(json.dumps(plan.to_json()))
    assert set(data) >= {"rounds", "predicted_ms", "lower_bound_ms", "solver_ms", "num_ranks"}
    assert set(data["rounds"][0]) == {"groups", "predicted_ms"}
    assert set(data["rounds"][0]["groups"][0]) == {"ranks", "degree", "algo", "samples", "predicted_ms"}
    back = Plan.from_json(data)
    assert back == plan
    assert back.digest() == plan.digest()


def test_from_json_infers_num_ranks_and_keeps_extra_fields():
    data = _plan(GOOD).to_json()
    del data["num_ranks"]
    data["note"] = "kept"
    back = Plan.from_json(data)
    assert back.num_ranks == 4
    assert back.to_json()["note"] == "kept"


def test_from_json_names_missing_field():
    data = _plan(GOOD).to_json()
    del data["rounds"][0]["groups"][1]["algo"]
    with pytest.raises(InvalidPlanError, match="'algo'"):
        Plan.from_json(data)


def test_digest_ignores_solver_time_but_not_layout():
    plan = _plan(GOOD)
    slower = Plan(plan.rounds, plan.predicted_ms, plan.lower_bound_ms, plan.solver_ms + 50, plan.num_ranks)
    assert slower.digest() == plan.digest()
    other = _plan([[((0, 1), (0,), "ring"), ((2,), (1,), "ring"), ((3,), (2, 3), "ring")]])
    assert other.digest() != plan.digest()
    assert len(plan.digest()) == 64


def test_groups_of_rank():
    plan = _plan(GOOD + [[((0, 1, 2, 3), (0, 1), "ring")]])
    assert [g.samples for g in plan.groups_of_rank(1)] == [(0,), (0, 1)]
    assert [g.samples for g in plan.groups_of_rank(3)] == [(3,), (0, 1)]
    with pytest.raises(ValueError, match="rank 4"):
        plan.groups_of_rank(4)


def test_group_degree_must_match_ranks():
    with pytest.raises(InvalidPlanError, match="degree 3"):
        GroupPlan((0, 1), 3, "ring", (0,), 1.0)


def test_validate_accepts_good_plan():
    validate_plan(_plan(GOOD), LENGTHS, COST)


@pytest.mark.parametrize("spec, lengths, message", [
    # sample 3 missing
    ([[((0, 1), (0,), "ring"), ((2,), (1, 2), "ring"), ((3,), (1,), "ring")]], LENGTHS, "already planned"),
    ([[((0, 1), (0,), "ring"), ((2, 3), (1, 2), "ring")]], LENGTHS, r"samples \[3\]"),
    # ranks 2..3 not covered: degrees sum to 3
    ([[((0, 1), (0,), "ring"), ((2,), (1, 2), "ring")]], LENGTHS, "degrees sum to 3"),
    # overlapping ranks
    ([[((0, 1), (0,), "ring"), ((1, 2), (1, 2), "ring"), ((3,), (3,), "ring")]], LENGTHS, "exactly once"),
    # non-contiguous ranks
    ([[((0, 2), (0,), "ring"), ((1,), (1, 2), "ring"), ((3,), (3,), "ring")]], LENGTHS, "contiguous"),
    # memory: 1500 tokens on one rank of 1000
    ([[((0,), (0,), "ring"), ((1, 2), (1, 2), "ring"), ((3,), (3,), "ring")]], LENGTHS, "exceed the memory"),
    # sample index out of range
    ([[((0, 1), (0,), "ring"), ((2,), (1, 2), "ring"), ((3,), (3, 9), "ring")]], LENGTHS, "outside"),
])
def test_validate_rejects(spec, lengths, message):
    rounds = []
    for round_spec in spec:
        groups = []
        for ranks, samples, algo in round_spec:
            t = 1.0 if any(s >= len(lengths) for s in samples) else _time(samples, len(ranks), algo)
            groups.append(GroupPlan(tuple(ranks), len(ranks), algo, tuple(samples), t))
        rounds.append(RoundPlan(tuple(groups), max(g.predicted_ms for g in groups)))
    plan = Plan(tuple(rounds), sum(r.predicted_ms for r in rounds), 0.0, 0.0, 4)
    with pytest.raises(InvalidPlanError, match=message):
        validate_plan(plan, lengths, COST)


def test_validate_rejects_infeasible_algo_and_inconsistent_times():
    # Ulysses on 3 ranks cannot split 32 heads.
    bad_algo = _plan([[((0, 1, 2), (0, 1), "ring"), ((3,), (2, 3), "ring")]])
    group = bad_algo.rounds[0].groups[0]
    swapped = GroupPlan(group.ranks, group.degree, "ulysses", group.samples, group.predicted_ms)
    plan = Plan((RoundPlan((swapped, bad_algo.rounds[0].groups[1]), bad_algo.rounds[0].predicted_ms),),
                bad_algo.predicted_ms, 0.0, 0.0, 4)
    with pytest.raises(InvalidPlanError, match="infeasible at degree 3"):
        validate_plan(plan, LENGTHS, COST)
    good = _plan(GOOD)
    wrong_total = Plan(good.rounds, good.predicted_ms + 1, 0.0, 0.0, 4)
    with pytest.raises(InvalidPlanError, match="sum of rounds"):
        validate_plan(wrong_total, LENGTHS, COST)


@pytest.mark.parametrize("kwargs, name", [
    ({"num_ranks": 0}, "num_ranks"),
    ({"num_ranks": -3}, "num_ranks"),
    ({"num_ranks": 4, "ranks_per_node": 0}, "ranks_per_node"),
    ({"num_ranks": 4, "max_degree": 5}, "max_degree"),
    ({"num_ranks": 4, "max_degree": 0}, "max_degree"),
    ({"num_ranks": 4, "max_rounds": 0}, "max_rounds"),
    ({"num_ranks": 4, "thorough_search": "yes"}, "thorough_search"),
])
def test_solver_config_errors_name_the_option(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SolverConfig(**kwargs)
