"""The ``jaxgraph`` command line. It only parses arguments; the library does the work.

On a CPU the command emulates ``--cpu-devices`` devices so that multi-part runs work on one
machine; this is set before JAX starts, never at library import. The default is 8, except for
``embed``, which gets as many as its ``--parts``: XLA's CPU runtime runs a program more slowly
when the host is split into more emulated devices than it uses (SGNS pairs per second on
BlogCatalog at one part: 1.07M with one device, 0.55M with eight; ca-AstroPh at two parts on
2 cores: 2.03M with two, 0.83M with eight).

``train`` also runs as one process per host (multi-controller JAX): the coordinator address,
process count and process id come from ``--coordinator --num-processes --process-id``, the
environment (``JAXGRAPH_COORDINATOR``, ``JAXGRAPH_NUM_PROCESSES``, ``JAXGRAPH_PROCESS_ID``) or a
multi-task SLURM / Open MPI launch (see :mod:`jaxgraph.distributed`); the runtime starts before
any other JAX call. Only process 0 prints the summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from pathlib import Path


def emulate_cpu_devices(n: int) -> None:
    """Emulates ``n`` CPU devices unless ``XLA_FLAGS`` already sets a count; takes effect when
    JAX starts its backend (call it before the first device query)."""
    flag = "--xla_force_host_platform_device_count"
    flags = os.environ.get("XLA_FLAGS", "")
    if flag not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {flag}={n}".strip()


def _cpu_devices(args) -> int:
    """``--cpu-devices``, or its default: an embedding run's ``--parts`` (at least 1; a bad
    count is reported with the other options), else 8."""
    if args.cpu_devices is not None:
        if args.cpu_devices < 1:
            raise SystemExit(f"--cpu-devices must be >= 1, got {args.cpu_devices}")
        return args.cpu_devices
    if args.command == "embed":
        parts = _embed_parts(args)
        return parts if isinstance(parts, int) and parts >= 1 else 1
    return 8


def _embed_parts(args) -> int:
    """The devices of an embedding run, before JAX starts: ``--parts``, else the config
    file's ``parts`` (an unreadable file is reported later, with the other options)."""
    if args.parts is not None:
        return args.parts
    if args.config is not None:
        from jaxgraph.configfile import read_config_file

        try:
            return read_config_file(args.config).get("parts", 1)
        except ValueError:
            return 1
    return 1


def _quantize_arg(text: str) -> int | str:
    """``--quantize``: a bit-width, or ``random`` / ``adaptive``."""
    return int(text) if text.isdigit() else text


def num_rows_arg(text: str) -> int | float:
    """``--sync-rows``: ``"1280"`` rows, or ``"0.068"`` a share of the nodes."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def row_cap_arg(text: str) -> int | None:
    """``--row-cap``: a positive integer, or ``none``."""
    return None if text.lower() == "none" else int(text)


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jaxgraph", description=__doc__.splitlines()[0])
    p.add_argument(
        "--cpu-devices",
        type=int,
        default=None,
        help="number of emulated CPU devices (default 8, or for 'embed' its --parts; ignored "
        "on GPU/TPU)",
    )
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("datasets", help="list the bundled datasets and their cache state")

    pp = sub.add_parser("partition", help="partition a graph and print the partition report")
    pp.add_argument("--dataset", help="bundled dataset (default cora), or 'sbm' / 'rmat'")
    pp.add_argument("--parts", type=int, default=8)
    pp.add_argument("--method", default="metis", choices=["metis", "random", "contiguous"])
    pp.add_argument("--seed", type=int, default=0)
    pp.add_argument("--heatmap", metavar="PNG", help="save the pair-volume heatmap here")
    pp.add_argument(
        "--out",
        metavar="FILE",
        help="write each node's part here (.csv: node id, part), keyed by the graph's node ids",
    )
    _add_graph_args(pp)

    tp = sub.add_parser("train", help="distributed full-graph training")
    tp.add_argument("--config", help="a .json or .toml TrainConfig; flags override it")
    tp.add_argument("--dataset", help="bundled dataset, or 'sbm' / 'rmat' (synthetic)")
    tp.add_argument("--nodes", type=int, help="synthetic graph size")
    tp.add_argument("--model", choices=["gcn", "sage", "gat"])
    tp.add_argument("--hidden", type=int)
    tp.add_argument("--layers", type=int)
    tp.add_argument("--dropout", type=float)
    tp.add_argument("--lr", type=float)
    tp.add_argument("--weight-decay", type=float)
    tp.add_argument("--parts", type=int)
    tp.add_argument("--partition", choices=["metis", "random", "contiguous"])
    tp.add_argument(
        "--method",
        help="vanilla, quant-8, quant-4, quant-2, quant-32 (uncompressed, same path), "
        "quant-random (quant-<2|4|8|random>-bf16: bfloat16 row parameters), adaqp (adaptive "
        "bit-widths), pipegcn[-f|-g|-fg|-sync][-q<bits>|-qadaptive], "
        "cagnet[-q<bits|random|adaptive>], "
        "sancus-<e|a|h><bound>[-w<warmup>][-clip<th>|-eclip<th>][-q<bits>], "
        "skipg[-<bound>][-w<warmup>][-q<bits>]",
    )
    tp.add_argument(
        "--assign-period", type=int, help="epochs per bit assignment (default epochs/5)"
    )
    tp.add_argument("--lam", type=float, help="adaqp: weight of variance vs time, in [0, 1]")
    tp.add_argument("--group-size", type=int, help="adaqp: messages per group")
    tp.add_argument(
        "--interconnect",
        help="adaqp: cost-model preset pricing device-to-device transfers (e.g. 10gbe)",
    )
    tp.add_argument(
        "--widths",
        type=int,
        nargs="+",
        help="adaqp, quant-random: the candidate bit-widths, from 2 4 8 (default: all three)",
    )
    tp.add_argument(
        "--assign-solver",
        help="adaqp: how the bit-width program is solved: milp (HiGHS through cvxpy, default) "
        "or frontier (exact, by per-channel Pareto frontiers)",
    )
    tp.add_argument(
        "--lookahead",
        type=int,
        help="adaqp: solve this many epochs before each period boundary, so that the new "
        "step compiles while training continues (default 0: at the boundary)",
    )
    tp.add_argument(
        "--param-dtype",
        help="quant-<2|4|8>, quant-random, adaqp: the precision of each quantized row's scale and "
        "offset on the wire: float32 (default, 8 bytes per row) or bfloat16 (4 bytes)",
    )
    tp.add_argument(
        "--exchange-chunks",
        type=int,
        help="quant-random, adaqp: 0 sizes the exchange's buffers for each assignment (a new "
        "step compiles for each); J >= 1 compiles one step for every assignment, padding each "
        "ring round's transfer to a multiple of 1/2^J of its 8-bit capacity (default: 6 on "
        "CPU, 0 on accelerators)",
    )
    tp.add_argument(
        "--no-compile-ahead",
        action="store_true",
        help="compile a decided assignment's step at the period boundary, not in the background",
    )
    tp.add_argument(
        "--score",
        choices=["sum", "squares"],
        help="adaqp: weigh a message by the square of the sum of its aggregation coefficients "
        "(default, the public implementation) or by their sum of squares (the paper's beta_k)",
    )
    tp.add_argument(
        "--quantize",
        type=_quantize_arg,
        help="pipegcn, cagnet, sancus, skipg: send the halo rows or broadcast blocks, and the "
        "gradients, stochastically quantized at this many bits (2, 4, 8; 32: the same path, "
        "exact); cagnet and sancus also take random or adaptive (a width per owner block, "
        "re-chosen every --assign-period epochs; adaptive by --lam, --widths, "
        "--interconnect); pipegcn also takes adaptive (AdaQP's widths per message group for "
        "the stale halos, with adaqp's options)",
    )
    tp.add_argument(
        "--allow-nonfinite",
        action="store_true",
        help="train on through a NaN or infinite loss (default: stop at that epoch, exit 2)",
    )
    tp.add_argument("--epochs", type=int)
    tp.add_argument("--seed", type=int)
    tp.add_argument("--eval-every", type=int)
    tp.add_argument("--checkpoint-every", type=int)
    tp.add_argument("--workdir")
    tp.add_argument("--no-progress", action="store_true")
    _add_graph_args(tp)
    _add_distributed_args(tp)

    ep = sub.add_parser("embed", help="random-walk node embedding (FeLoG, DeepWalk, node2vec)")
    ep.add_argument("--dataset", help="bundled dataset (default blogcatalog), or 'sbm'")
    ep.add_argument("--nodes", type=int, help="size of the 'sbm' graph (default 2000)")
    ep.add_argument(
        "--config",
        help="a .json or .toml EmbedConfig (every setting, FaBC and the pipeline included); "
        "options given override it",
    )
    ep.add_argument("--method", help="felog (default), deepwalk or node2vec")
    ep.add_argument(
        "--preset",
        help="defaults of every option below: published (DeepWalk's published settings: 10 "
        "rounds of one walk of 80 per node, window 10, d 128, 5 negatives, word2vec's linear "
        "learning-rate decay), cpu (walks of 40, window 5, per-round decay: the experiments' "
        "CPU-sized runs) or gpu (the published settings in steps of 16,384 pairs, negatives "
        "shared by 8 pairs, row cap 16); an option given on the command line overrides its "
        "preset value",
    )
    ep.add_argument("--walker", help="walks of --method felog: deepwalk (default) or node2vec")
    ep.add_argument("--dim", type=int)
    ep.add_argument("--window", type=int)
    ep.add_argument("--negatives", type=int)
    ep.add_argument("--sample", type=float)
    ep.add_argument("--counts", help="corpus or degree")
    ep.add_argument("--walk-length", type=int)
    ep.add_argument("--walks-per-node", type=int, help="per round")
    ep.add_argument("--rounds", type=int, help="max (felog) or fixed rounds")
    ep.add_argument("--p", type=float, help="node2vec return parameter")
    ep.add_argument("--q", type=float, help="node2vec in-out parameter")
    ep.add_argument("--mu", type=float)
    ep.add_argument("--neighbors", type=int, help="k_s of the feedback")
    ep.add_argument("--stop-ratio", type=float)
    ep.add_argument("--reactivate", action="store_true", default=None)
    ep.add_argument("--warmup-rounds", type=int)
    ep.add_argument(
        "--center", action="store_true", default=None, help="feedback on mean-centred vectors"
    )
    ep.add_argument("--lr", type=float)
    ep.add_argument(
        "--init-scale",
        type=float,
        help="syn0 starts uniform on [-s/d, s/d] (default 0.5, word2vec's; 1: gensim 4's)",
    )
    ep.add_argument("--lr-decay", type=float)
    ep.add_argument(
        "--lr-schedule",
        help="round (alpha_0 e^(-decay r) per round), linear (also decays within each round) "
        "or global (one linear decay over all rounds, as word2vec)",
    )
    ep.add_argument("--batch-size", type=int)
    ep.add_argument(
        "--shared-negatives",
        type=int,
        help="pairs of a step that share one draw of negatives (1: every pair draws its own, "
        "word2vec)",
    )
    ep.add_argument(
        "--row-cap",
        type=row_cap_arg,
        default=argparse.SUPPRESS,
        help="a row met k times in a step moves by min(1, cap/k) times the sum of its updates "
        "(default 4); none: the plain sum",
    )
    ep.add_argument("--sync-every", type=int)
    ep.add_argument(
        "--interleave",
        type=int,
        help="steps whose batches interleave: a batch draws its pairs from about this many "
        "batches of consecutive pairs (default 8)",
    )
    ep.add_argument(
        "--merge",
        help="replica merge: mean, sum or touched (each row takes the mean change of the "
        "replicas that changed it)",
    )
    ep.add_argument(
        "--pairs",
        help="where skip-gram pairs are built: host (moved to the devices) or device (the walks "
        "move; same pairs)",
    )
    ep.add_argument(
        "--sync",
        help="periodic replica sync: all (every row; default), hotspot (HaSyn) or random (as many "
        "rows)",
    )
    ep.add_argument(
        "--full-every",
        type=int,
        help="hotspot/random: every this many periodic syncs merges all rows (default 32)",
    )
    ep.add_argument(
        "--hotness",
        help="hotspot: update counts of the whole run (total, default), of the round (round) "
        "or since each row's last merge (pending)",
    )
    ep.add_argument(
        "--sync-rows",
        type=num_rows_arg,
        default=None,
        help="hotspot: merge this many hottest rows per sync, or this share of the nodes if "
        "below 1 (default: one per equal-count block); random: as many rows (default: as many "
        "as hotspot)",
    )
    ep.add_argument("--parts", type=int, help="devices to train on (default 1)")
    ep.add_argument("--seed", type=int, help="seeds walks, pairs and the evaluation (default 0)")
    ep.add_argument("--task", default="auto", help="auto, lp, nc or none")
    ep.add_argument("--train-ratios", default="0.1,0.5,0.9")
    ep.add_argument("--shuffles", type=int, default=2)
    ep.add_argument("--retrieval", action="store_true", help="also FAISS Hit/MRR/nDCG@K")
    ep.add_argument(
        "--out",
        help="directory for embedding.npy (row i: node i of nodes.txt, the graph's own ids), "
        "context.npy, nodes.txt, rounds.jsonl, eval.json",
    )
    ep.add_argument(
        "--on-unhealthy",
        help="a round whose loss per pair or largest row norm leaves its healthy range: warn "
        "(default), stop or ignore (jaxgraph.embed.health)",
    )
    ep.add_argument("--max-norm", type=float, help="the largest healthy row norm (default 100)")
    ep.add_argument("--quiet", action="store_true")
    _add_graph_args(ep)
    _add_distributed_args(ep)
    return p


def _add_graph_args(parser) -> None:
    g = parser.add_argument_group("a graph file of your own, instead of --dataset")
    g.add_argument(
        "--graph",
        metavar="PATH",
        help="a PyG-style .npz (edge_index, x, y, masks), an edge list (.txt/.csv/.tsv, "
        "optionally .gz; any node ids), a SciPy sparse .npz adjacency, or an OGB "
        "node-property dataset directory",
    )
    g.add_argument(
        "--format",
        choices=["pyg", "edgelist", "scipy", "ogb"],
        help="the file's format (default: from its name and content)",
    )
    d = g.add_mutually_exclusive_group()
    d.add_argument(
        "--directed",
        dest="directed",
        action="store_const",
        const=True,
        help="the edges are directed (needed where the file cannot say)",
    )
    d.add_argument(
        "--undirected",
        dest="directed",
        action="store_const",
        const=False,
        help="each edge goes both ways",
    )
    g.add_argument(
        "--features", metavar="FILE", help=".npy (rows in node-id order) or an id-keyed table"
    )
    g.add_argument("--labels", metavar="FILE", help="a table of node id and label")


def _add_distributed_args(parser) -> None:
    dist = parser.add_argument_group(
        "multi-process runs (one process per host; default: environment, see jaxgraph.distributed)"
    )
    dist.add_argument("--coordinator", help="host:port of process 0 (JAXGRAPH_COORDINATOR)")
    dist.add_argument("--num-processes", type=int, help="(JAXGRAPH_NUM_PROCESSES)")
    dist.add_argument("--process-id", type=int, help="this process, 0-based (JAXGRAPH_PROCESS_ID)")
    dist.add_argument(
        "--init-timeout",
        type=int,
        help="seconds to wait for all processes to connect (JAXGRAPH_INIT_TIMEOUT, default 300)",
    )
    dist.add_argument(
        "--heartbeat-timeout",
        type=int,
        help="seconds of silence before a peer counts as dead "
        "(JAXGRAPH_HEARTBEAT_TIMEOUT, default 100)",
    )


# Method options of `train`: the flag's attribute -> the field of the method it sets
# ("assign.lam": a field of AdaQP's AssignConfig). A flag whose field the chosen method does
# not take is an error naming both, never silently ignored.
_METHOD_FLAGS = {
    "assign_period": "period",
    "exchange_chunks": "chunks",
    "no_compile_ahead": "compile_ahead",
    "widths": "widths",
    "param_dtype": "param_dtype",
    "score": "score",
    "quantize": "quantize",
    "lam": "assign.lam",
    "group_size": "assign.group_size",
    "interconnect": "assign.interconnect",
    "assign_solver": "assign.solver",
    "lookahead": "assign.lookahead",
}
# Config fields -> the flag that sets them, for messages.
_FIELD_FLAGS = {
    "data.num_nodes": "--nodes",
    "data.seed": "--seed",
    "model.name": "--model",
    "model.hidden": "--hidden",
    "model.num_layers": "--layers",
    "model.dropout": "--dropout",
    "optim.learning_rate": "--lr",
    "optim.weight_decay": "--weight-decay",
    "parts": "--parts",
    "partition": "--partition",
    "epochs": "--epochs",
    "seed": "--seed",
    "eval_every": "--eval-every",
    "checkpoint_every": "--checkpoint-every",
    "adaqp.period": "--assign-period",
    "sancus.period": "--assign-period",
    "cagnet.period": "--assign-period",
    "pipegcn.period": "--assign-period",
    "quantized.period": "--assign-period",
    "adaqp.chunks": "--exchange-chunks",
    "quantized.chunks": "--exchange-chunks",
    "pipegcn.chunks": "--exchange-chunks",
    "quantized.param_dtype": "--param-dtype",
    "adaqp.param_dtype": "--param-dtype",
    "adaqp.score": "--score",
    "pipegcn.score": "--score",
    "pipegcn.quantize": "--quantize",
    "cagnet.quantize": "--quantize",
    "sancus.quantize": "--quantize",
    "skipg.quantize": "--quantize",
}


def _name_flag(message: str) -> str:
    """A config error's leading field (``model.dropout must ...``) with its flag."""
    field = message.split(" ", 1)[0]
    flag = _FIELD_FLAGS.get(field)
    return f"{flag} ({field}){message[len(field) :]}" if flag else message


def _taker(key: str, field: str) -> str:
    """The spelling of the method ``key`` (of ``METHOD_TYPES``) that takes ``field``."""
    from jaxgraph.train.methods import PipeGCN, Quantized

    if key == "quantized":
        return "quant-random" if field in Quantized._RANDOM_ONLY else "quant-<2|4|8|random>"
    if key in ("cagnet", "sancus") and field in ("period", "assign"):
        return {"cagnet": "cagnet", "sancus": "sancus-<...>"}[key] + "-q<random|adaptive>"
    if key == "pipegcn" and field in PipeGCN._ADAPTIVE_ONLY:
        return "pipegcn-qadaptive"
    return key


def _method_with_flags(method, args):
    """``method`` with the method options given on the command line."""
    from jaxgraph.train.methods import METHOD_TYPES

    applied = set()
    if args.quantize is not None and "quantize" in method.options():
        # First: it decides which of the other options apply (block widths take --lam, ...).
        method = method.replace(quantize=args.quantize)
        applied.add("quantize")
    changes, assign = {}, {}
    for attr, field in _METHOD_FLAGS.items():
        value = getattr(args, attr)
        if value is None or value is False or attr in applied:
            continue
        flag = "--" + attr.replace("_", "-")
        if attr == "no_compile_ahead":
            value = False
        if attr == "widths":
            value = tuple(value)
            own = {f.name for f in dataclasses.fields(method)}
            field = "assign.widths" if "widths" not in own and "assign" in own else field
        top, _, sub = field.partition(".")
        if top not in method.options():
            takers = [
                _taker(key, top)
                for key, cls in METHOD_TYPES.items()
                if top in {f.name for f in dataclasses.fields(cls)}
            ]
            raise ValueError(
                f"{flag} applies to --method {' or '.join(takers)} only, not {method.label()!r}"
            )
        if sub:
            assign[sub] = value
        else:
            changes[top] = value
    if assign:
        changes["assign"] = dataclasses.replace(method.assign, **assign)
    return method.replace(**changes) if changes else method


def _graph_fields(args) -> dict:
    """``--graph`` and its companions as :class:`DataConfig` fields (those given)."""
    if args.graph is None:
        for opt in ("format", "features", "labels", "directed"):
            if getattr(args, opt) is not None:
                raise ValueError(f"--{opt} applies to a graph file (--graph PATH) only")
        return {}
    if args.dataset is not None:
        raise ValueError("give --dataset or --graph, not both")
    fields = {"graph": args.graph, "format": args.format, "directed": args.directed}
    fields["name"] = None  # the file takes the place of the config's dataset
    fields.update(features=args.features, labels=args.labels)
    return {k: v for k, v in fields.items() if v is not None or k == "name"}


def _train_config(args):
    from jaxgraph.train import TrainConfig, load_config
    from jaxgraph.train.methods import parse_method

    try:
        cfg = load_config(args.config) if args.config else TrainConfig()
        method = _method_with_flags(parse_method(args.method or cfg.method), args)
        data = {
            k: v for k, v in (("name", args.dataset), ("num_nodes", args.nodes)) if v is not None
        }
        data.update(_graph_fields(args))
        model = {
            k: v
            for k, v in (
                ("name", args.model),
                ("hidden", args.hidden),
                ("num_layers", args.layers),
                ("dropout", args.dropout),
            )
            if v is not None
        }
        optim = {
            k: v
            for k, v in (("learning_rate", args.lr), ("weight_decay", args.weight_decay))
            if v is not None
        }
        top = {
            k: v
            for k, v in (
                ("parts", args.parts),
                ("partition", args.partition),
                ("epochs", args.epochs),
                ("seed", args.seed),
                ("eval_every", args.eval_every),
                ("checkpoint_every", args.checkpoint_every),
                ("workdir", args.workdir),
            )
            if v is not None
        }
        if args.no_progress:
            top["progress"] = False
        if args.allow_nonfinite:
            top["allow_nonfinite"] = True
        return cfg.replace(
            data=dataclasses.replace(cfg.data, **data),
            model=dataclasses.replace(cfg.model, **model),
            optim=dataclasses.replace(cfg.optim, **optim),
            method=method,
            **top,
        )
    except ValueError as e:
        raise ValueError(_name_flag(str(e))) from e


def _start_distributed(args) -> str:
    """Joins a multi-process run if one is configured; returns a label for messages."""
    from jaxgraph.distributed import DistributedConfig, initialize

    config = DistributedConfig.from_env(
        coordinator=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
        init_timeout=args.init_timeout,
        heartbeat_timeout=args.heartbeat_timeout,
    )
    if not initialize(config):
        return ""
    import jax

    return f" (process {jax.process_index()}/{jax.process_count()})"


def check_output_file(path: str, option: str) -> Path:
    """An output file's path, checked before any work: its directory exists and it is not
    itself a directory."""
    out = Path(path)
    if out.is_dir():
        raise ValueError(f"{option} {path} is a directory; give a file name")
    if not out.parent.is_dir():
        raise ValueError(f"{option} {path}: directory {out.parent} does not exist")
    return out


def _partition(args) -> None:
    from jaxgraph.atomic import atomic_write_text
    from jaxgraph.data import DataConfig, load_graph
    from jaxgraph.mesh import make_mesh
    from jaxgraph.partition import partition_graph, partition_report

    if args.parts < 1:
        raise ValueError(f"--parts must be an integer >= 1, got {args.parts}")
    out = check_output_file(args.out, "--out") if args.out else None
    heatmap = check_output_file(args.heatmap, "--heatmap") if args.heatmap else None
    graph = load_graph(
        DataConfig(**{"name": args.dataset, "seed": args.seed, **_graph_fields(args)}).with_default(
            "cora"
        )
    )
    if args.parts > graph.num_nodes:
        raise ValueError(
            f"--parts {args.parts} exceeds the {graph.num_nodes} nodes of {graph.name!r}"
        )
    make_mesh(args.parts)  # the plan targets this many devices
    parts = partition_graph(graph, args.parts, method=args.method, seed=args.seed)
    report = partition_report(graph, parts)
    print(f"{graph!r}\n{args.method} partition into {args.parts} parts\n")
    print(report.format())
    if heatmap is not None:
        report.save_heatmap(heatmap)
        print(f"\npair-volume heatmap written to {heatmap}")
    if out is not None:
        rows = "".join(
            f"{i},{p}\n" for i, p in zip(graph.ids.tolist(), parts.tolist(), strict=True)
        )
        atomic_write_text(out, "node,part\n" + rows)
        print(f"parts of {graph.num_nodes} nodes written to {out}")


def _log_notes() -> None:
    """What the library notes while reading inputs (a split made, self-loops removed) goes
    to stderr."""
    log = logging.getLogger("jaxgraph")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("jaxgraph: note: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    _log_notes()
    emulate_cpu_devices(_cpu_devices(args))
    where = ""
    try:
        if args.command == "train":  # every option checked before any JAX work
            config = _train_config(args)
            if config.workdir is not None and Path(config.workdir).is_file():
                raise ValueError(f"--workdir {config.workdir} is a file, not a directory")
        if args.command in ("train", "embed"):
            where = _start_distributed(args)  # before any other JAX call
        if args.command == "datasets":
            from jaxgraph.data import format_dataset_info

            print(format_dataset_info())
        elif args.command == "partition":
            _partition(args)
        elif args.command == "embed":
            from jaxgraph.distributed import is_primary
            from jaxgraph.embed.run import run_cli

            summary = run_cli(args)
            if is_primary():
                print(json.dumps(summary, indent=2))
        elif args.command == "train":
            from jaxgraph.distributed import is_primary
            from jaxgraph.train import train

            summary = train(config)
            if is_primary():
                print(json.dumps(summary, indent=2))
    except (ValueError, RuntimeError, OSError) as e:
        print(f"jaxgraph {args.command}{where}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
