"""FaBC in an embedding run: :class:`FabcConfig` (the ``compress`` option of
:func:`jaxgraph.embed.run.embed`) and :class:`WalkCodec`, which encodes each round's corpus on
the host and decodes it on the device (format and size model: :mod:`jaxgraph.embed.compress`).
"""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np

from jaxgraph.embed.compress import (
    CompressedWalks,
    Scope,
    check_scope,
    choose_k,
    corpus_hot_ids,
    decode_on_device,
    encode,
    frequency_profile,
    pad_to_bucket,
    raw_bytes,
)
from jaxgraph.embed.device_pairs import DeviceWalks
from jaxgraph.embed.walks import Walks
from jaxgraph.options import flag


@dataclasses.dataclass(frozen=True)
class FabcConfig:
    """FaBC in an embedding run.

    Attributes:
      scope: ``"walk"`` (each walk's top-``k``; the seed's reading) or ``"corpus"`` (one hot
        set, fixed from the first round's corpus).
      k: hot ranks; None chooses it by Eq. 8 on the first round's corpus (then kept).
      k_max: upper bound for the Eq. 8 choice.
      interpret: decode with the Pallas kernel in interpret mode (CPU tests only).
      bucket: pad each round's walk count and residual length to a size class
        (:func:`pad_to_bucket`) before the transfer, so that the decode compiles once per size
        class instead of once per round (the active set, hence the corpus shape, changes every
        round). The padding moves with the corpus and is counted in ``sent_bytes``.
    """

    scope: Scope = flag("--compress", "walk")
    k: int | None = flag("--fabc-k", None)
    k_max: int = flag("--fabc-k-max", 8)
    interpret: bool = flag("--fabc-interpret", False)
    bucket: bool = flag("--no-fabc-bucket", True)

    def __post_init__(self):
        check_scope(self.scope)
        if self.k is not None and self.k < 0:
            raise ValueError(f"k must be >= 0 or None, got {self.k}")
        if self.k_max < 0:
            raise ValueError(f"k_max must be >= 0, got {self.k_max}")


@dataclasses.dataclass
class CodecStats:
    """One round's transfer: ``raw_bytes`` (``S_0``), ``sent_bytes`` (what moved host ->
    device: ``S(k)`` plus any bucket padding), ``k``, the seconds of encode + transfer + decode
    and ``payload_bytes`` (``S(k)``, Eq. 6)."""

    raw_bytes: int
    sent_bytes: int
    k: int
    seconds: float
    payload_bytes: int = 0


class WalkCodec:
    """Sends each round's walks to ``device`` (default: the first) compressed and decodes them
    there. The first corpus fixes ``k`` (Eq. 8 unless configured) and, for ``scope="corpus"``,
    the hot ids; later rounds reuse them, as the seed does."""

    def __init__(self, config: FabcConfig, device: jax.Device | None = None):
        self.config = config
        self.device = device if device is not None else jax.devices()[0]
        self.k: int | None = config.k
        self.hot_ids: np.ndarray | None = None

    def encode(self, walks: Walks) -> CompressedWalks:
        """Host side: the compressed corpus (profiling the first corpus it sees)."""
        cfg = self.config
        if self.k is None:
            n = walks.num_walks
            mean = walks.num_tokens / n if n else 0.0
            profile = frequency_profile(walks, cfg.scope)
            self.k = choose_k(profile, np.asarray(walks.nodes).shape[1], mean, k_max=cfg.k_max)
        if cfg.scope == "corpus":
            if self.hot_ids is None:
                self.hot_ids = corpus_hot_ids(walks, self.k)
            return encode(walks, self.k, scope="corpus", hot_ids=self.hot_ids)
        return encode(walks, self.k, scope="walk")

    def transfer(self, walks: Walks) -> tuple[Walks, CodecStats]:
        """Encodes on the host, ``device_put``s the compressed arrays, decodes on the device;
        returns the decoded walks as host arrays (equal to ``walks``) and :class:`CodecStats`."""
        t0 = time.perf_counter()
        compressed = self.encode(walks)
        decoded, sent = self.decode(compressed)
        seconds = time.perf_counter() - t0
        stats = CodecStats(raw_bytes(walks), sent, compressed.k, seconds, compressed.nbytes)
        return decoded, stats

    def decode(
        self, compressed: CompressedWalks, *, to_host: bool = True
    ) -> tuple[Walks | DeviceWalks, int]:
        """Moves ``compressed`` (padded to its size class when ``config.bucket``) to the
        device and decodes it there; returns the walks and the bytes moved host -> device. With
        ``to_host=False`` the walks stay on the device (:class:`DeviceWalks`, padding rows
        included) for a trainer that builds its pairs there (``SkipGramConfig(pairs="device")``).
        """
        sent = pad_to_bucket(compressed) if self.config.bucket else compressed
        on_device = jax.device_put(sent, self.device)
        nodes, lengths = decode_on_device(on_device, interpret=self.config.interpret)
        w = compressed.num_walks
        if not to_host:
            return DeviceWalks(nodes, np.asarray(compressed.lengths, np.int32)), sent.nbytes
        return Walks(np.asarray(nodes)[:w], np.asarray(lengths)[:w]), sent.nbytes
