"""`edl simulate` on a cluster run by Kueue (the shipped kueue-cohort scenario): the
whole job counts against its ClusterQueue, elastic jobs borrow from the cohort up to
their limit, a higher priority preempts within its ClusterQueue and the preempted job
is readmitted; a scenario naming a LocalQueue it lacks is refused in words."""

from __future__ import annotations

import pytest

from edl.sim.runner import run_policy
from edl.sim.scenario import ScenarioError, load_scenario


def test_the_kueue_scenario_borrows_to_the_limit_preempts_and_readmits():
    timeline = run_policy(load_scenario("kueue-cohort"), "default").timeline
    jobs = timeline.jobs
    a = [x + y for x, y in zip(jobs["a-1"].trainers_running,
                               jobs["a-2"].trainers_running, strict=True)]
    # team-a: 24 CPU own + 12 borrowed, less its two masters and pservers (3 CPU): at
    # most 16 trainers of 2 CPU, and it borrows (more than 10.5 trainers' worth)
    assert max(a) == 16
    low, urgent = jobs["b-low"].trainers_running, jobs["b-urgent"].trainers_running
    at = {t: i for i, t in enumerate(timeline.times)}
    assert low[at[400]] == 4  # admitted in team-b's own quota
    assert urgent[at[480]] == 12 and low[at[480]] == 0  # preempted by the urgent job
    assert low[at[590]] == 4  # readmitted when a-2 ended and gave its borrowed quota back


def test_a_job_naming_a_local_queue_the_scenario_lacks_is_refused(tmp_path):
    text = (load_scenario("kueue-cohort").model_dump_json())
    bad = tmp_path / "bad.json"
    bad.write_text(text.replace('"queue":"team"', '"queue":"nowhere"', 1))
    with pytest.raises(ScenarioError, match=r"LocalQueue 'nowhere' is not in kueue\.local_queues"):
        load_scenario(bad)
