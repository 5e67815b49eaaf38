"""A model registered from outside the library (``register_model``) trains by its name through
``train(config)``, ``jaxgraph train --model NAME`` and a config file's ``[model] name``; names
are not reused, and the errors that list the models list it."""

import json
from pathlib import Path

import flax.linen as nn
import numpy as np
import pytest

from jaxgraph.cli import main
from jaxgraph.models import MODEL_TYPES, MODELS, make_model, register_model
from jaxgraph.train import ModelConfig, TrainConfig, load_config, train
from jaxgraph.train.checkpoint import latest_checkpoint

from graph_cases import random_graph

NAME = "residual-mean"
GRAPH = random_graph(n=60, avg_deg=4, seed=7)


class ResidualMean(nn.Module):
    """``h' = W (h + mean_{u in N_in(v)} h_u)`` per layer: the contract of a registered model
    and nothing more (a module of the test, not of the library)."""

    hidden: int
    out_dim: int
    num_layers: int = 2
    dropout: float = 0.0
    layer_norm: bool = False

    def layer_input_dims(self, in_dim: int) -> tuple[int, ...]:
        return (in_dim,) + (self.hidden,) * (self.num_layers - 1)

    @nn.compact
    def __call__(self, x, propagate, *, train: bool):
        h = x
        for layer in range(self.num_layers):
            last = layer == self.num_layers - 1
            drop = nn.Dropout(self.dropout, deterministic=not train)
            h = propagate.drop(h, layer=layer, dropout=drop)
            h = h + propagate(h, layer=layer, norm="mean")
            h = nn.Dense(self.out_dim if last else self.hidden)(h)
            if not last:
                h = nn.relu(nn.LayerNorm()(h) if self.layer_norm else h)
        return h


@pytest.fixture(scope="module")
def registered():
    """``NAME`` is registered for these tests and removed again after them."""
    register_model(NAME, ResidualMean)
    yield ResidualMean
    MODEL_TYPES.pop(NAME, None)


def _lines(workdir: Path) -> list[dict]:
    return [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]


def test_builtins_come_first_and_the_registered_model_is_built_by_name(registered):
    assert MODELS == ("gcn", "sage", "gat")
    assert tuple(MODEL_TYPES) == (*MODELS, NAME)
    model = make_model(NAME, hidden=8, out_dim=3, num_layers=3, layer_norm=True, heads=2)
    assert type(model) is registered and model.layer_norm and model.num_layers == 3
    assert model.layer_input_dims(5) == (5, 8, 8)
    assert ModelConfig(name=NAME).name == NAME


def test_trains_through_train_config_with_checkpoints_and_resume(registered, tmp_path):
    def config(epochs):
        return TrainConfig(
            model=ModelConfig(name=NAME, hidden=8, dropout=0.5),
            parts=2,
            epochs=epochs,
            checkpoint_every=1,
            progress=False,
            workdir=str(tmp_path),
        )

    summary = train(config(1), graph=GRAPH)
    assert summary["model"] == NAME and np.isfinite(summary["final_loss"])
    assert latest_checkpoint(tmp_path / "checkpoints") is not None
    train(config(2), graph=GRAPH)  # resumes from epoch 1's checkpoint
    lines = _lines(tmp_path)
    assert [x["epoch"] for x in lines] == [1, 2]
    assert all(np.isfinite(x["loss"]) for x in lines)


def test_trains_through_the_command_line(registered, tmp_path, capsys):
    argv = ["train", "--dataset", "sbm", "--nodes", "64", "--num-features", "8"]
    argv += ["--parts", "2", "--epochs", "1", "--hidden", "8", "--no-progress"]
    assert main([*argv, "--model", NAME, "--workdir", str(tmp_path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"] == NAME and np.isfinite(summary["final_loss"])
    assert [x["epoch"] for x in _lines(tmp_path)] == [1]
    assert main([*argv, "--model", "nope"]) == 2
    assert f"gcn, sage, gat, {NAME}, got 'nope'" in capsys.readouterr().err


def test_trains_through_a_toml_config(registered, tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text(
        f'parts = 2\nepochs = 1\n\n[data]\nname = "sbm"\nnum_nodes = 64\nnum_features = 8\n\n'
        f'[model]\nname = "{NAME}"\nhidden = 8\nlayer_norm = true\n'
    )
    config = load_config(path)
    assert config.model == ModelConfig(name=NAME, hidden=8, layer_norm=True)
    assert main(["train", "--config", str(path), "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"] == NAME and np.isfinite(summary["final_loss"])


def test_names_are_not_reused_and_errors_list_every_model(registered):
    with pytest.raises(ValueError, match=f"model '{NAME}' is already registered"):
        register_model(NAME, registered)
    with pytest.raises(ValueError, match="model 'gcn' is built in"):
        register_model("gcn", registered)
    with pytest.raises(ValueError, match="a model's name must be a non-empty word"):
        register_model("two words", registered)
    with pytest.raises(TypeError, match="model 'x' is not a class or callable"):
        register_model("x", 3)
    assert tuple(MODEL_TYPES) == (*MODELS, NAME)  # nothing refused was kept
    listed = f"gcn, sage, gat, {NAME}"
    with pytest.raises(ValueError, match=f"unknown model 'mlp'; choose one of {listed}$"):
        make_model("mlp", hidden=8, out_dim=3)
    with pytest.raises(ValueError, match=f"model.name must be one of {listed}, got 'mlp'"):
        ModelConfig(name="mlp")


def test_heads_reach_a_module_with_a_heads_field_and_the_contract_is_checked(monkeypatch):
    class WithHeads(ResidualMean):
        heads: int = 1

    class NoDims(nn.Module):
        hidden: int
        out_dim: int
        num_layers: int = 2
        dropout: float = 0.0
        layer_norm: bool = False

    monkeypatch.setitem(MODEL_TYPES, "with-heads", WithHeads)
    monkeypatch.setitem(MODEL_TYPES, "no-dims", NoDims)
    assert make_model("with-heads", hidden=8, out_dim=3, heads=2).heads == 2
    assert make_model("gat", hidden=8, out_dim=3, heads=2).heads == 2
    with pytest.raises(TypeError, match=r"model 'no-dims' \(NoDims\) has no method layer_input"):
        make_model("no-dims", hidden=8, out_dim=3)
