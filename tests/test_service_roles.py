"""The service apart from the client (issue #63 item 1): who runs which model, and what names it.

The distinct service here is a small model built in the test (MiniLM's tokenizer and architecture, 64 wide
and two layers deep, its own random weights), so no second download is needed; its width tells at once
which model produced a vector (MiniLM's rows are 384 wide). The real mpnet path is a slow test of the
assembly (tests/test_model_assembly.py).
"""

from __future__ import annotations

import pytest

from rapt_audit import RunConfig, run
from rapt_audit.encoder.models import model_fingerprint
from rapt_audit.pipeline.config import build_config, settings_id
from rapt_audit.pipeline.context import RunContext
from rapt_audit.pipeline.results import signature, signature_fields
from rapt_audit.pipeline.roles import defense_context, input_space

from tests.conftest import SERVICE_WIDTH


def test_a_run_that_names_no_service_keeps_its_cell_id():
    plain = RunConfig(defense="t2t", dataset="synthetic", profile="smoke")
    stored_before = {k: v for k, v in plain.to_dict().items() if k != "service_model"}  # a result of before #63
    assert settings_id(stored_before) == plain.cell_id()
    # The client's own model named as the service is the same world: one spelling, one cell.
    assert RunConfig(defense="t2t", dataset="synthetic", profile="smoke", service_model="minilm").cell_id() \
        == plain.cell_id()
    other = RunConfig(defense="t2t", dataset="synthetic", profile="smoke", service_model="/models/mpnet")
    assert other.cell_id() != plain.cell_id()


def test_the_service_model_is_set_three_ways():
    assert build_config(sets=["service.model=/m/a"]).service_model == "/m/a"
    assert build_config(sets=["service_model=/m/b"]).service_model == "/m/b"
    assert build_config(cli={"service_model": "/m/c"}).service_model == "/m/c"
    assert build_config().service_model is None


def test_the_signature_names_the_service_only_when_it_is_apart():
    common = dict(dataset="sst2", data_fingerprint="d" * 16, split_sizes={"victim_train": 1}, model="minilm",
                  model_fingerprint="m" * 16, profile="cpu", attacks={"whitebox": {}}, package_version="0.9.0")
    assert "service" not in signature_fields(signature(**common))
    apart = signature(**common, service="mpnet", service_fingerprint="s" * 16)
    assert signature_fields(apart)["service"] == "mpnet@ssssssss"
    assert apart.index("service:") > apart.index("model:")


def test_token_vector_defenses_release_in_the_service_space(small_service):
    from rapt_audit.api.plugins import DEFENSES

    ctx = RunContext(model="minilm", service_model=small_service)
    for name in ("embedding", "snd"):
        assert input_space(DEFENSES.get(name)()) == "service", name
    for name in ("t2t", "cape", "dpnr", "local", "identity"):
        assert defense_context(ctx, DEFENSES.get(name)()) is ctx, name
    view = defense_context(ctx, DEFENSES.get("embedding")())
    assert view.model == small_service and view.service().dim == SERVICE_WIDTH
    assert view.shared(("probe",), lambda: 1) == 1 and ctx.shared(("probe",), lambda: 2) == 1  # one run's caches
    assert RunContext(model="minilm").as_service().model == "minilm"


def test_identity_customizes_the_service_not_the_client(small_service, tmp_path, monkeypatch):
    from rapt_audit.utility import customized

    widths = []
    real = customized.select_and_train

    def spy(loaded, *args, **kwargs):
        widths.append(loaded.dim)
        return real(loaded, *args, **kwargs)

    monkeypatch.setattr(customized, "select_and_train", spy)
    config = RunConfig(defense="identity", attacks="random_guess", dataset="synthetic", profile="smoke",
                       service_model=small_service, defense_args={"method": "prompt", "epochs": 1},
                       out=str(tmp_path / "apart"))
    result = run(config)
    assert widths == [SERVICE_WIDTH]
    assert result.env["service_model"] == small_service
    assert result.env["service_model_fingerprint"] == model_fingerprint(small_service)
    fields = signature_fields(result.signature)
    assert fields["model"].startswith("minilm@") and fields["service"].startswith(small_service + "@")
    assert result.config["service_model"] == small_service


def test_a_text_release_is_the_clients_whatever_the_service(small_service, tmp_path):
    """T2T's mechanism runs on the client's table: the same release, so the same attack numbers, with the service
    apart; only the signature (and a customized service's utility) says which service it was."""
    runs = {}
    for label, service in (("same", None), ("apart", small_service)):
        runs[label] = run(RunConfig(defense="t2t", attacks="whitebox", dataset="synthetic", profile="smoke",
                                    service_model=service, defense_args={"eta": 100},
                                    out=str(tmp_path / label)))
    same, apart = runs["same"], runs["apart"]
    assert dict(same.attacks["whitebox"].metrics) == dict(apart.attacks["whitebox"].metrics)
    assert same.defense["release_meta"]["verbatim"] == apart.defense["release_meta"]["verbatim"]
    assert "service" not in signature_fields(same.signature) and "service" in signature_fields(apart.signature)


def test_an_embedding_release_and_its_attack_live_in_the_service_space(small_service, tmp_path, monkeypatch):
    from rapt_audit.defenses._token_embedding import TokenEmbeddingDefense

    widths = []
    real = TokenEmbeddingDefense.release

    def spy(self, records, *, ctx):
        release = real(self, records, ctx=ctx)
        widths.extend({v.shape[1] for v in release.token_embeddings})
        return release

    monkeypatch.setattr(TokenEmbeddingDefense, "release", spy)
    result = run(RunConfig(defense="embedding", attacks="whitebox", dataset="synthetic", profile="smoke",
                           service_model=small_service, defense_args={"method": "probe", "eta": 50},
                           out=str(tmp_path / "embedding")))
    assert set(widths) == {SERVICE_WIDTH}
    from rapt_audit.api.types import AttackResult

    assert isinstance(result.attacks["whitebox"], AttackResult), result.attacks["whitebox"]


BENCH = """\
name = "apart"
profile = "smoke"
seeds = [0]
attacks = ["whitebox"]

[service]
method = "prompt"
model = "{service}"

[datasets]
utility = "synthetic"
inversion = "synthetic"

[defenses.identity]

[defenses.local]
client = ["encoder"]
"""


def test_a_benchmark_names_its_service_once_for_every_cell(tmp_path):
    from rapt_audit.benchmark.plan import plan_cells
    from rapt_audit.benchmark.run import index_document
    from rapt_audit.benchmark.validate import load_benchmark

    path = tmp_path / "apart.toml"
    path.write_text(BENCH.format(service="/models/mpnet"), encoding="utf-8")
    bench = load_benchmark(path, check_data=False)
    cells = plan_cells(bench, out=tmp_path / "out")
    # Every cell, the local client's too: a table joins only rows of one world (one signature).
    assert {c.cell.config.service_model for c in cells} == {"/models/mpnet"} and len(cells) == 2
    assert bench.service == (("method", "prompt"),)  # the protocol, applied to defenses with a method
    assert bench.service_text.startswith("model=/models/mpnet")
    assert index_document(bench, cells)["service_model"] == "/models/mpnet"
    # The client's own model as the service is no service apart: the cells of before.
    path.write_text(BENCH.format(service="minilm"), encoding="utf-8")
    same = load_benchmark(path, check_data=False)
    assert same.service_model is None and {c.cell.config.service_model for c in plan_cells(same, out=tmp_path)} == {None}


def test_a_bundle_refuses_a_service_it_cannot_carry():
    from rapt_audit.api.errors import UsageError
    from rapt_audit.bundle.packing import _model_spec

    assert _model_spec([RunConfig(defense="t2t")]) == "minilm"
    with pytest.raises(UsageError, match="--service-model /models/mpnet.*embedded model only"):
        _model_spec([RunConfig(defense="t2t", service_model="/models/mpnet")])
    with pytest.raises(UsageError, match="--model mpnet"):
        _model_spec([RunConfig(defense="t2t", model="mpnet")])


def test_lora_finds_the_query_and_value_projections_of_an_mpnet_service():
    """peft's table has BERT's names (query, value), not MPNet's (q, v): a LoRA service on mpnet once failed
    with NoMatchingPeftModuleError before any training."""
    from transformers import AutoModel, MPNetConfig

    from rapt_audit.encoder.models import LoadedModel
    from rapt_audit.utility.customize import resolve_settings
    from rapt_audit.utility.task_model import build_task_model

    config = MPNetConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=40)
    loaded = LoadedModel("tiny-mpnet", "tiny-mpnet", None, AutoModel.from_config(config), "cpu", "f" * 64)
    model = build_task_model(loaded, resolve_settings("lora", "smoke"), 2)
    adapted = {name.split(".lora_")[0].rsplit(".", 1)[-1] for name, p in model.named_parameters()
               if p.requires_grad and ".lora_" in name}
    assert adapted == {"q", "v"}, adapted


def test_a_service_model_not_assembled_here_is_named_before_any_work(tmp_path):
    """The test session's cache (conftest) holds no assembled mpnet: a run and a benchmark's dry run say which role's
    model is missing and the step that assembles it, before loading any data."""
    from rapt_audit.api.errors import ModelError
    from rapt_audit.benchmark.validate import load_benchmark
    from rapt_audit.pipeline import runner

    with pytest.raises(ModelError, match=r"the service's model: .*scripts/bootstrap --mpnet"):
        runner.plan(RunConfig(defense="identity", dataset="synthetic", profile="smoke", service_model="mpnet",
                              out=str(tmp_path / "run")))
    assert not (tmp_path / "run").exists()
    path = tmp_path / "apart.toml"
    path.write_text(BENCH.format(service="mpnet"), encoding="utf-8")
    problems: list[str] = []
    load_benchmark(path, problems=problems)
    line = BENCH.splitlines().index('model = "{service}"') + 1  # found by hand, not by the code under test
    assert any(f"apart.toml:{line}:" in p and "scripts/bootstrap --mpnet" in p for p in problems), problems
