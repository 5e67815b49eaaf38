"""Typed methods: the short spellings parse into them and back, config files name them as
sections, every field is validated, and a field that does not apply to a method is an error
naming it."""

import json
import math

import pytest

from jaxgraph.comm.adaptive import AssignConfig
from jaxgraph.comm.staleness import StalenessPolicy
from jaxgraph.train import (
    CAGNET,
    AdaQP,
    PipeGCN,
    Quantized,
    Sancus,
    SkipG,
    TrainConfig,
    Vanilla,
    load_config,
    make_strategy,
    parse_method,
)
from jaxgraph.train.methods import METHOD_TYPES, method_from_dict

SPELLINGS = {
    "vanilla": Vanilla(),
    "quant-4": Quantized(4),
    "quant-32": Quantized(32),
    "quant-random": Quantized("random"),
    "adaqp": AdaQP(),
    "pipegcn": PipeGCN(),
    "pipegcn-sync": PipeGCN(stale=False),
    "pipegcn-fg": PipeGCN(feature_momentum=0.95, gradient_momentum=0.95),
    "pipegcn-f0.9g0.8": PipeGCN(feature_momentum=0.9, gradient_momentum=0.8),
    "cagnet": CAGNET(),
    "cagnet-q4": CAGNET(4),
    "sancus-e1": Sancus("epoch", 1),
    "sancus-a2-w10": Sancus("adaptive", 2, warmup=10),
    "sancus-h0.04-w20-clip1.5": Sancus("gap", 0.04, warmup=20, clip=1.5),
    "sancus-e1-eclip2": Sancus("epoch", 1, clip=2.0, clip_at="embeddings"),
    "sancus-a2-w10-clip1-q8": Sancus("adaptive", 2, warmup=10, clip=1.0, quantize=8),
    "sancus-einf": Sancus("epoch", math.inf),
    "skipg": SkipG(),
    "skipg-2-w20": SkipG(2, 20),
    "skipg-inf": SkipG(math.inf),
    "skipg-2-w20-q4": SkipG(2, 20, 4),
}


@pytest.mark.parametrize("text", sorted(SPELLINGS))
def test_spellings_parse_to_types_and_back(text):
    method = parse_method(text)
    assert method == SPELLINGS[text]
    assert method.label() == text
    assert parse_method(method.label()) == method


def test_every_listed_spelling_parses():
    assert {parse_method(m).label() for m in SPELLINGS} == set(SPELLINGS)


@pytest.mark.parametrize(
    "text", ["quant-3", "quant-", "pipegcn-", "pipegcn-x", "sancus-", "sancus-x1", "cagnet-2"]
)
def test_unknown_spellings_are_errors(text):
    """A type's name alone is its defaults (``--method sancus``, as a ``[method.sancus]``
    section); anything else it does not spell is an error listing the spellings."""
    with pytest.raises(ValueError, match=f"unknown method {text!r}; expected one of vanilla"):
        parse_method(text)


def test_a_whole_epoch_bound_is_checked():
    with pytest.raises(ValueError, match="sancus.bound of policy 'epoch' is whole epochs"):
        parse_method("sancus-e1.5")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Quantized(3), "quantized.bits must be 2, 4, 8, 32 or 'random', got 3"),
        (lambda: Quantized(4, period=5), "quantized.period applies to bits='random' only"),
        (lambda: Quantized(8, widths=(2, 4)), "quantized.widths applies to bits='random' only"),
        (lambda: Quantized(2, chunks=3), "quantized.chunks applies to bits='random' only"),
        (lambda: Quantized("random", chunks=99), "quantized.chunks must be an integer in [0,"),
        (lambda: Quantized("random", period=-1), "quantized.period must be an integer >= 0"),
        (lambda: AdaQP(score="cubes"), "adaqp.score must be 'sum' or 'squares', got 'cubes'"),
        (
            lambda: AdaQP(AssignConfig(lookahead=5), period=5),
            "adaqp.assign.lookahead (5 epochs) must be shorter than adaqp.period (5 epochs)",
        ),
        (lambda: PipeGCN(feature_momentum=1.0), "pipegcn.feature_momentum must lie in [0, 1)"),
        (lambda: PipeGCN(stale=False, gradient_momentum=0.5), "they need stale = true"),
        (lambda: Sancus("often"), "sancus.policy must be one of ('epoch', 'adaptive', 'gap')"),
        (lambda: Sancus(bound=-1), "sancus.bound must be a number >= 0"),
        (lambda: Sancus(warmup=-2), "sancus.warmup must be an integer >= 0, got -2"),
        (lambda: Sancus(clip=0.0), "sancus.clip must be a positive number or none, got 0.0"),
        (
            lambda: Sancus(clip=1.0, clip_at="weights"),
            "sancus.clip_at must be one of ('parameters', 'embeddings'), got 'weights'",
        ),
        (
            lambda: Sancus(clip_at="embeddings"),
            "sancus.clip_at applies only with a clipping threshold (sancus.clip)",
        ),
        (lambda: SkipG(1.5), "skipg.bound must be whole epochs >= 0"),
        (lambda: CAGNET(quantize=3), "cagnet.quantize must be none, 2, 4, 8 or 32 (bits), got 3"),
        (lambda: Sancus(quantize=16), "sancus.quantize must be none, 2, 4, 8 or 32 (bits)"),
    ],
)
def test_fields_are_validated_with_their_names(make, message):
    with pytest.raises(ValueError) as e:
        make()
    assert message in str(e.value)


# For each method, a field it does not take.
NOT_APPLICABLE = {
    "vanilla": "period",
    "quantized": "score",
    "adaqp": "widths",
    "pipegcn": "warmup",
    "cagnet": "warmup",
    "sancus": "chunks",
    "skipg": "clip",
}


@pytest.mark.parametrize("key", sorted(METHOD_TYPES))
def test_each_registered_name_is_its_defaults(key):
    assert parse_method(key) == METHOD_TYPES[key]()


@pytest.mark.parametrize("key", sorted(METHOD_TYPES))
def test_each_method_rejects_a_field_it_does_not_take(key, tmp_path):
    method = METHOD_TYPES[key]()
    field = NOT_APPLICABLE[key]
    with pytest.raises(ValueError, match=f"{field!r} does not apply to method"):
        method.replace(**{field: 1})
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"method": {key: {field: 1}}}))
    with pytest.raises(ValueError, match=rf"unknown key\(s\) \['{field}'\] in method.{key}"):
        load_config(path)


def test_a_config_file_names_the_method_as_a_section(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(
        "parts = 2\n[method.adaqp]\nperiod = 10\nscore = 'squares'\n"
        "[method.adaqp.assign]\nlam = 0.3\nwidths = [2, 8]\n"
    )
    cfg = load_config(path)
    assert cfg.method == AdaQP(AssignConfig(lam=0.3, widths=(2, 8)), period=10, score="squares")
    path.write_text('method = "sancus-h0.04-clip1"\n')
    assert load_config(path).method == Sancus("gap", 0.04, clip=1.0)
    path.write_text("[method.sancus]\npolicy = 'epoch'\nbound = 'inf'\n")
    assert load_config(path).method == Sancus("epoch", math.inf)
    path.write_text("[method.zip]\n")
    with pytest.raises(ValueError, match=r"unknown method section \[method.zip\]"):
        load_config(path)


@pytest.mark.parametrize("method", list(SPELLINGS.values()), ids=list(SPELLINGS))
def test_configs_round_trip_through_json(method):
    cfg = TrainConfig(method=method)
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def _plan(num_parts):
    from jaxgraph.partition import build_halo_plan, partition_graph

    from graph_cases import random_graph

    graph = random_graph(n=60, avg_deg=4, seed=1)
    parts = partition_graph(graph, num_parts, method="metis", seed=0)
    return build_halo_plan(graph, parts, num_parts=num_parts)


def test_a_method_is_its_exchange_and_its_controller_takes_the_run():
    """The run's length resolves a period of 0, its model the aggregation, its seed the
    draws; the backend's default layout a chunks of None."""
    from jaxgraph.comm.method import RunInfo
    from jaxgraph.partition.buckets import default_chunks

    plan, dims = _plan(4), (8, 8)
    adaqp = AdaQP(AssignConfig(lam=0.2), period=0, chunks=3)
    assert make_strategy(adaqp, epochs=50) is adaqp
    ctl = adaqp.controller(plan, dims, run=RunInfo(epochs=50, model="sage"))
    assert (ctl.period, ctl.chunks, ctl.config.lam, ctl.squares, ctl.norm) == (
        10,
        3,
        0.2,
        False,
        "mean",
    )
    assert AdaQP(score="squares").controller(plan, dims, run=RunInfo(epochs=10)).squares
    assert AdaQP().controller(plan, dims).chunks == default_chunks()
    rand = Quantized("random", widths=(2, 4), period=7, chunks=1)
    ctl = rand.controller(plan, dims, run=RunInfo(epochs=50, seed=4))
    assert (ctl.period, ctl.seed, ctl.chunks) == (7, 4, 1)
    with pytest.raises(ValueError, match=r"lookahead \(5 epochs\) must be shorter than the"):
        make_strategy(AdaQP(AssignConfig(lookahead=5)), epochs=20)  # period 20 // 5 = 4
    sancus = make_strategy("sancus-h0.04-w20-clip1.5", epochs=50)
    assert sancus.staleness == StalenessPolicy("gap", 0.04, 20)
    assert sancus.local_grad_clip == 1.5 and sancus.embedding_grad_clip is None
    sancus = make_strategy("sancus-e1-eclip2", epochs=50)
    assert sancus.local_grad_clip is None and sancus.embedding_grad_clip == 2.0
    assert sancus.name == "sancus-e1-eclip2"
    # A block-row method is its own exchange: one class, one validation.
    assert type(sancus) is Sancus and sancus == Sancus("epoch", 1, clip=2.0, clip_at="embeddings")
    assert make_strategy("pipegcn-g").gradient_momentum == 0.95
    assert make_strategy("skipg-2").layout == "block" and make_strategy("adaqp").layout == "halo"


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(epochs=0), "epochs must be an integer >= 1, got 0"),
        (dict(parts=0), "parts must be an integer >= 1, got 0"),
        (dict(eval_every=0), "eval_every must be an integer >= 1, got 0"),
        (dict(checkpoint_every=-1), "checkpoint_every must be an integer >= 0"),
        (dict(partition="spectral"), "partition must be one of metis, random, contiguous"),
        (dict(seed=-3), "seed must be an integer >= 0, got -3"),
    ],
)
def test_run_fields_are_validated(changes, message):
    with pytest.raises(ValueError) as e:
        TrainConfig(**changes)
    assert message in str(e.value)


def test_pipegcn_quantize_spelling_config_and_flag(capsys):
    """``-q<bits>`` on any PipeGCN spelling, ``quantize`` in a config section, ``--quantize``
    on the command line (an error with any other method)."""
    from jaxgraph.cli import main

    for text, method in (
        ("pipegcn-q4", PipeGCN(quantize=4)),
        ("pipegcn-fg-q8", PipeGCN(feature_momentum=0.95, gradient_momentum=0.95, quantize=8)),
        ("pipegcn-sync-q32", PipeGCN(stale=False, quantize=32)),
    ):
        assert parse_method(text) == method and method.label() == text
    assert method_from_dict({"pipegcn": {"quantize": 2}}) == PipeGCN(quantize=2)
    with pytest.raises(ValueError, match="pipegcn.quantize must be none, 2, 4, 8 or 32"):
        PipeGCN(quantize=3)
    with pytest.raises(ValueError, match="unknown method 'pipegcn-q3'"):
        parse_method("pipegcn-q3")
    assert main(["train", "--dataset", "nope", "--method", "adaqp", "--quantize", "4"]) == 2
    err = capsys.readouterr().err
    assert "--quantize applies to --method pipegcn or cagnet or sancus or skipg only, not " in err


def test_adaqp_bfloat16_parameters_spelling_config_and_flag(capsys):
    """``adaqp-bf16``, ``param_dtype`` in the section, ``--param-dtype`` with adaqp: the
    exchange's layouts and program both count 4-byte row parameters."""
    from jaxgraph.cli import main

    method = parse_method("adaqp-bf16")
    assert method == AdaQP(param_dtype="bfloat16") and method.label() == "adaqp-bf16"
    section = {"adaqp": {"param_dtype": "bfloat16", "period": 5}}
    assert method_from_dict(section).param_dtype == "bfloat16"
    assert AdaQP() != AdaQP(param_dtype="bfloat16")  # another exchange, another step
    with pytest.raises(ValueError, match="adaqp.param_dtype must be one of"):
        AdaQP(param_dtype="half")
    argv = ["train", "--dataset", "nope", "--method", "adaqp", "--param-dtype", "bfloat16"]
    assert main(argv) == 2
    assert "unknown dataset 'nope'" in capsys.readouterr().err  # the option was taken


def test_pipegcn_adaptive_widths_spelling_config_and_flags(capsys):
    """``-qadaptive`` (stale only), ``quantize = "adaptive"`` with AdaQP's fields in a config
    section, ``--quantize adaptive`` with ``--assign-period`` / ``--lam``; those fields on a
    fixed-width PipeGCN are an error naming the spelling that takes them."""
    from jaxgraph.cli import main
    from jaxgraph.comm.adaptive import AssignConfig
    from jaxgraph.comm.method import RunInfo

    method = parse_method("pipegcn-qadaptive")
    assert method == PipeGCN(quantize="adaptive") and method.label() == "pipegcn-qadaptive"
    section = {"pipegcn": {"quantize": "adaptive", "period": 5, "assign": {"lam": 0.9}}}
    method = method_from_dict(section)
    assert method == PipeGCN(quantize="adaptive", period=5, assign=AssignConfig(lam=0.9))
    plan = _plan(4)
    controller = method.controller(plan, (8, 8), run=RunInfo(epochs=50))
    assert (controller.period, controller.config.lam) == (5, 0.9)
    controller = PipeGCN(quantize="adaptive").controller(plan, (8, 8), run=RunInfo(epochs=50))
    assert controller.period == 10  # epochs // 5
    with pytest.raises(ValueError, match="needs stale = true"):
        parse_method("pipegcn-sync-qadaptive")
    with pytest.raises(ValueError, match="pipegcn.period applies to quantize='adaptive' only"):
        PipeGCN(quantize=4, period=5)
    with pytest.raises(ValueError, match="lookahead .* must be shorter than pipegcn.period"):
        PipeGCN(quantize="adaptive", period=2, assign=AssignConfig(lookahead=2))
    argv = ["train", "--dataset", "nope", "--method", "pipegcn", "--assign-period", "5"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--assign-period applies to --method" in err and "pipegcn-qadaptive" in err


def test_quantized_param_dtype_spelling_config_and_flag(capsys, tmp_path):
    """bfloat16 row parameters: ``-bf16`` on a quantized spelling, ``param_dtype`` in the
    config section, ``--param-dtype`` on the command line; a wrong value names the field."""
    from jaxgraph.cli import main

    for text, method in (
        ("quant-4-bf16", Quantized(4, param_dtype="bfloat16")),
        ("quant-random-bf16", Quantized("random", param_dtype="bfloat16")),
    ):
        assert parse_method(text) == method and method.label() == text
    section = {"quantized": {"bits": 2, "param_dtype": "bfloat16"}}
    assert method_from_dict(section) == Quantized(2, param_dtype="bfloat16")
    assert Quantized(2, param_dtype="bfloat16") != Quantized(2)
    path = tmp_path / "run.toml"
    path.write_text("[method.quantized]\nbits = 4\nparam_dtype = 'bfloat16'\n")
    assert load_config(path).method == Quantized(4, param_dtype="bfloat16")
    path.write_text("[method.quantized]\nbits = 4\nparam_dtype = 'half'\n")
    with pytest.raises(ValueError, match="quantized.param_dtype must be one of"):
        load_config(path)
    with pytest.raises(ValueError, match="quantized.param_dtype must be one of"):
        Quantized(4, param_dtype="float16")
    with pytest.raises(ValueError, match="unknown method 'quant-32-bf16'"):
        parse_method("quant-32-bf16")
    argv = ["train", "--dataset", "nope", "--method", "quant-4", "--param-dtype"]
    assert main([*argv, "fp16"]) == 2
    err = capsys.readouterr().err
    assert "--param-dtype (quantized.param_dtype) must be one of 'float32', 'bfloat16'" in err
    assert main([*argv, "bfloat16"]) == 2  # taken: the missing dataset is what stops the run
    err = capsys.readouterr().err
    assert "unknown dataset 'nope'" in err and "param" not in err
