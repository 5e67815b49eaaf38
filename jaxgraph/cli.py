"""The ``jaxgraph`` command line, generated from the typed configs.

Each subcommand reads a typed config (:class:`~jaxgraph.train.TrainConfig`,
:class:`~jaxgraph.embed.EmbedJob`, :class:`~jaxgraph.partition.job.PartitionJob`): every field
is an option (:mod:`jaxgraph.options`), and a ``--config`` file gives the values they start from.
Only the process-level options (:data:`PROCESS_OPTIONS`) are not fields.

On a CPU the command emulates ``--cpu-devices`` devices (default 8; for ``embed`` its
``--parts``: XLA's CPU runtime is slower split into more devices than a run uses), set before
JAX starts. ``train`` and ``embed`` also run as one process per host
(:mod:`jaxgraph.distributed`); only process 0 prints the summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from pathlib import Path

from jaxgraph.configfile import read_config_file
from jaxgraph.data.source import DataConfig
from jaxgraph.options import Choice, Options, attribute_help

_NOTES = logging.StreamHandler()  # the notes' handler: "jaxgraph: note: <note>" on stderr
_NOTES.setFormatter(logging.Formatter("jaxgraph: note: %(message)s"))
# The options that are not fields of a config: the process and where its values start from.
PROCESS_OPTIONS = tuple(
    "--help --cpu-devices --config --preset --coordinator --num-processes --process-id "
    "--init-timeout --heartbeat-timeout".split()
)


def emulate_cpu_devices(n: int) -> None:
    """Emulates ``n`` CPU devices unless ``XLA_FLAGS`` already sets a count; takes effect when
    JAX starts its backend (call it before the first device query)."""
    flag = "--xla_force_host_platform_device_count"
    flags = os.environ.get("XLA_FLAGS", "")
    if flag not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {flag}={n}".strip()


def _method_choice() -> Choice:
    from jaxgraph.train.methods import METHOD_TYPES, parse_method

    return Choice(
        types=lambda: METHOD_TYPES,
        make=lambda text, config: parse_method(text),
        label=lambda method: method.label(),
        taker=lambda cls, field: cls.taker(field),
        applies=lambda method, field: field in method.options(),
        modes=lambda cls: cls.modes,
        forms=lambda: ", ".join(c.spellings or c.key for c in METHOD_TYPES.values()),
    )


def _sync_choice() -> Choice:
    from jaxgraph.embed.run import SYNC_TYPES, sync_key

    def make(text: str, job):
        if text not in SYNC_TYPES:
            raise ValueError(f"unknown sync {text!r}; expected {', '.join(SYNC_TYPES)}")
        return None if text == "all" else SYNC_TYPES[text](merge=job.config.sgns.merge)

    def label(sync) -> str:
        return "all" if sync is None else sync_key(sync)

    return Choice(types=lambda: SYNC_TYPES, make=make, label=label)


def _options(command: str) -> Options:
    if command == "train":
        from jaxgraph.train import TrainConfig

        return Options(TrainConfig(), {"method": _method_choice()})
    if command == "embed":
        from jaxgraph.embed.job import EmbedJob

        return Options(EmbedJob(), {"config.sync": _sync_choice()})
    from jaxgraph.partition.job import PartitionJob

    return Options(PartitionJob())


def _build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or, given the arguments ``argv``, with the options of the
    command they name only (the others stay listed): the options come from the typed configs,
    and importing those of ``train`` costs seconds that an ``embed`` run need not pay."""
    devices = argparse.ArgumentParser(add_help=False)  # before or after the command
    devices.add_argument(
        "--cpu-devices",
        type=int,
        default=argparse.SUPPRESS,
        help="number of emulated CPU devices (default 8, or for 'embed' its --parts; ignored "
        "on GPU/TPU)",
    )
    p = argparse.ArgumentParser(
        prog="jaxgraph", description=__doc__.splitlines()[0], parents=[devices]
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("datasets", help="list the bundled datasets and their cache state")
    helps = {
        "partition": "partition a graph and print the partition report",
        "train": "distributed full-graph training",
        "embed": "random-walk node embedding (FeLoG, DeepWalk, node2vec)",
    }
    named = None if argv is None else next((a for a in argv if a in helps), "")
    for command, help_ in helps.items():
        sp = sub.add_parser(command, help=help_, description=help_, parents=[devices])
        if named not in (None, command):
            continue
        if command != "partition":
            sp.add_argument(
                "--config", help="a .json or .toml config file; the options given override it"
            )
        if command == "embed":
            from jaxgraph.embed.job import PRESETS

            sp.add_argument(
                "--preset",
                choices=list(PRESETS),
                help="the defaults every option starts from (default published): "
                + "; ".join(f"{name}: {what}" for name, what in PRESETS.items()),
            )
        _options(command).add_to(sp)
        if command != "partition":
            _add_distributed_args(sp)
    return p


def _add_distributed_args(parser) -> None:
    from jaxgraph.distributed import ENV, DistributedConfig

    group = parser.add_argument_group(
        "multi-process runs (one process per host; default: environment, see jaxgraph.distributed)"
    )
    helps = attribute_help(DistributedConfig)
    for f in dataclasses.fields(DistributedConfig):
        default = "" if f.default is None else f", default {f.default}"
        kind = str if f.name == "coordinator" else int
        help_ = f"{helps[f.name]} ({ENV[f.name]}{default})"
        group.add_argument("--" + f.name.replace("_", "-"), type=kind, help=help_)


def _cpu_devices(args) -> int:
    """``--cpu-devices``, or its default: an embedding run's ``--parts`` (else the config
    file's ``parts``; a bad count is reported later with the other options), else 8."""
    given = getattr(args, "cpu_devices", None)  # absent unless given, before or after the command
    if given is not None:
        if given < 1:
            raise SystemExit(f"--cpu-devices must be >= 1, got {given}")
        return given
    if args.command != "embed":
        return 8
    parts = getattr(args, "--parts", None)
    try:
        if parts is None and args.config is not None:
            parts = read_config_file(args.config).get("parts", 1)
        return max(int(parts or 1), 1)
    except (TypeError, ValueError):
        return 1


def _source(data: DataConfig, args) -> DataConfig:
    """``data`` with ``--dataset`` or ``--graph`` in place of the graph it names."""
    dataset, graph = getattr(args, "--dataset", None), getattr(args, "--graph", None)
    if dataset is not None and graph is not None:
        raise ValueError("give --dataset or --graph, not both")
    if graph is not None:
        return dataclasses.replace(data, name=None, graph=graph)
    if dataset is not None:
        fields = ("graph", "format", "directed", "features", "labels")
        return dataclasses.replace(data, name=dataset, **dict.fromkeys(fields))
    return data


def job_from_args(argv: list[str]):
    """The config a command line (``["train", "--lr", "0.1"]``) describes, checked."""
    return _job(_build_parser(argv).parse_args(argv))


def _job(args):
    """The config of ``args.command`` (the file's or preset's, with the options given), checked."""
    if args.command == "train":
        from jaxgraph.train import TrainConfig, load_config

        base = load_config(args.config) if args.config else TrainConfig()
        base = base.replace(data=_source(base.data, args))
        cfg = _options("train").read(base, args)
        if cfg.workdir is not None and Path(cfg.workdir).is_file():
            raise ValueError(f"--workdir {cfg.workdir} is a file, not a directory")
        return cfg
    if args.command == "embed":
        from jaxgraph.embed.job import EmbedJob, base_config

        method = getattr(args, "--method", None)
        base = base_config(method, preset_name=args.preset, config=args.config)
        base = base.replace(data=_source(base.data, args))
        return _options("embed").read(EmbedJob(config=base), args)
    from jaxgraph.partition.job import PartitionJob

    base = PartitionJob(data=_source(PartitionJob().data, args))
    job = _options("partition").read(base, args)
    job.check_outputs()
    return job


def _log_notes() -> None:
    """The library's notes on its inputs go to this call's stderr (a test may replace it)."""
    log = logging.getLogger("jaxgraph")
    if not log.handlers:
        log.addHandler(_NOTES)
        log.setLevel(logging.INFO)
        log.propagate = False
    _NOTES.stream = sys.stderr  # not setStream(): it flushes the old one, maybe closed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _build_parser(argv).parse_args(argv)
    _log_notes()
    emulate_cpu_devices(_cpu_devices(args))
    where = ""
    try:
        if args.command == "datasets":
            from jaxgraph.data import format_dataset_info

            print(format_dataset_info())
            return 0
        job = _job(args)  # every option checked before any data is read or JAX starts
        if args.command == "partition":
            from jaxgraph.partition.job import run_partition

            run_partition(job)
            return 0
        from jaxgraph.distributed import DistributedConfig, initialize, is_primary

        given = {f.name: getattr(args, f.name) for f in dataclasses.fields(DistributedConfig)}
        if initialize(DistributedConfig.from_env(**given)):  # before any other JAX call
            import jax

            where = f" (process {jax.process_index()}/{jax.process_count()})"
        if args.command == "embed":
            from jaxgraph.embed.job import run_job

            summary = run_job(job)
        else:
            from jaxgraph.train import train

            summary = train(job)
        if is_primary():
            print(json.dumps(summary, indent=2))
    except (ValueError, RuntimeError, OSError) as e:
        print(f"jaxgraph {args.command}{where}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
