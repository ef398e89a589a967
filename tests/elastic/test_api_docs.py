"""The `edl.elastic` API is documented as it behaves (issue 33 item 8): a one-process
run shows what `end_of_epoch` receives (0-based epochs), that `batch_size` is per
worker and where the rank is; the docs say so, and that the script must not call
init_process_group; the scenario reference marks its required keys."""

from __future__ import annotations

from pathlib import Path

import torch

import edl.elastic
from edl.elastic import Batch, ElasticLoop, State

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_a_one_process_run_behaves_as_the_docs_say() -> None:
    model = torch.nn.Linear(2, 1)
    state = State(model, torch.optim.SGD(model.parameters(), lr=0.1), note="kept")
    loop = ElasticLoop(state, dataset_size=10, batch_size=4, epochs=2, env={})
    steps: list[Batch] = []
    epochs: list[int] = []
    ranks: list[tuple[int, int]] = []

    def train_step(batch: Batch) -> None:
        steps.append(batch)
        ranks.append((loop.rank, loop.world))

    assert loop.run(train_step, end_of_epoch=epochs.append) is True
    assert epochs == [0, 1]  # 0-based, once per epoch
    assert [len(b.indices) for b in steps] == [4, 4, 2] * 2  # batch_size per worker
    assert ranks == [(0, 1)] * 6 and all(b.scale == 1 / len(b.indices) for b in steps)
    assert state.extra == {"note": "kept"}


def test_the_docs_name_every_part_of_the_api_and_what_a_script_must_not_do() -> None:
    text = (DOCS / "trainer-api.md").read_text()
    section = text[text.index("## Collective live mode: `edl.elastic`"):]
    for name in edl.elastic.__all__:
        assert f"`{name}" in section, name
    for fact in ("must **not** call `init_process_group`", "**0-based**", "`loop.rank`",
                 "`batch_size` is **per worker**", "end_of_epoch(epoch)"):
        assert fact in section, fact
    reference = (DOCS / "simulation.md").read_text()
    assert "measure:                          # required" in reference
    assert "steady_state: {start: 250, end: 530}   # required" in reference
