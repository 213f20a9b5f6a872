"""Layer-reduced e5-small taught by a fine-tuned e5 (knowledge distillation of sentence embeddings).

The student is e5-small cut to some of its layers (`rag.train.e5.bert_from_e5`); it learns to reproduce the teacher's
unit vectors of the same prefixed texts (loss: mean cosine distance, 1 - cos), as in Reimers & Gurevych 2020
("Making Monolingual Sentence Embeddings Multilingual using Knowledge Distillation") and sentence-transformers'
layer-reduction example, where a student with fewer layers is trained by MSE on its teacher's embeddings. No labels
are needed, so any text of the training half can teach: questions, paragraphs, sentences, and sentences with words
dropped (the recogniser's losses). The number of epochs is chosen by the cosine distance on held-out texts (early
stopping on a validation set that the caller draws from the training half).
Needs the ``.[train]`` extra (PyTorch).
"""
from __future__ import annotations

import copy
import math
import random
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from rag.retrieval.e5 import PASSAGE, QUERY, E5Embedder, E5File, E5Tokenizer
from rag.train.e5 import bert_from_e5, encode
from rag.train.pairs import FORMS
from rag.train.score_distill import held_out_articles


def dropped_words(text: str, rate: float, rng: random.Random) -> str:
    """``text`` with each word dropped with probability ``rate`` (at least one word kept): a crude stand-in for the
    words a recogniser loses, used only as teaching text. Raises ValueError unless 0 <= rate < 1."""
    if not 0 <= rate < 1:
        raise ValueError(f"drop rate must be in [0, 1), got {rate}")
    words = text.split()
    kept = [w for w in words if rng.random() >= rate]
    return " ".join(kept or words[:1])


def teaching_texts(passages: Sequence[Mapping], queries: Sequence[Mapping], drop_rate: float, seed: int,
                   val_every: int = 5) -> dict:
    """Unlabelled teaching texts from HeySQuAD's training half only (even articles, as
    `rag.bench.heysquad.article_split`): ``{"train" | "val": {"queries": [...], "passages": [...]}}`` (unprefixed).
    Queries: each question's typed, human-ASR and machine-ASR text, every sentence of the half's paragraphs
    (`rag.voice.verify.split_sentences`) and a copy of it with words dropped (`dropped_words` at ``drop_rate``,
    drawn with ``seed``); passages: the paragraphs and their sentences. Texts repeated within a role are kept once.
    The even articles in ascending order, every ``val_every``-th from the first, are the validation texts (early
    stopping; `rag.train.score_distill.held_out_articles`); no text of an odd article appears. Raises ValueError for
    val_every < 2, KeyError for a query whose gold paragraph is missing."""
    from rag.voice.verify import split_sentences

    held = held_out_articles(passages, val_every)
    article = {p["_id"]: int(p["article"]) for p in passages}
    out = {part: {"queries": {}, "passages": {}} for part in ("train", "val")}
    rng = random.Random(seed)
    for p in sorted(passages, key=lambda p: p["_id"]):
        if article[p["_id"]] % 2:
            continue
        part = out["val" if article[p["_id"]] in held else "train"]
        part["passages"][p["text"]] = None
        for sentence in split_sentences(p["text"]):
            part["passages"][sentence] = None
            part["queries"][sentence] = None
            part["queries"][dropped_words(sentence, drop_rate, rng)] = None
    for q in queries:
        gold = q["relevant"][0]
        if gold not in article:
            raise KeyError(f"query {q['id']}: gold paragraph {gold!r} is not in the passages")
        if article[gold] % 2 == 0:
            for form in FORMS:
                out["val" if article[gold] in held else "train"]["queries"][q[form]] = None
    return {part: {role: list(texts) for role, texts in roles.items()} for part, roles in out.items()}


def length_batches(lengths: Sequence[int], batch_size: int, seed: int | str, pool: int = 8) -> list[list[int]]:
    """Indices shuffled by ``seed``, cut into pools of ``pool`` batches, each pool sorted by length and cut into
    batches of ``batch_size`` (similar lengths together: less padding), the batches then shuffled. Every index is used
    exactly once. Raises ValueError for batch_size < 1."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    size = batch_size * pool
    batches = []
    for start in range(0, len(order), size):
        chunk = sorted(order[start:start + size], key=lambda i: lengths[i])
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def distill(e5: E5File, layers: Sequence[int], texts: Sequence[str], targets: np.ndarray,
            val_texts: Sequence[str], val_targets: np.ndarray, seed: int, max_epochs: int = 10,
            batch_size: int = 32, lr: float = 1e-4, warmup_ratio: float = 0.1, weight_decay: float = 0.01,
            threads: int = 2, max_tokens: int = 512, passage_targets: np.ndarray | None = None,
            temperature: float = 0.01, start: str | Path | None = None):
    """Train e5-small cut to ``layers`` so that its mean-pooled unit vector of each (already prefixed) text in
    ``texts`` matches the row of ``targets`` ((n, 384) float32 unit rows: the teacher's vectors of the same texts),
    minimising the mean cosine distance; AdamW, linear warm-up over ``warmup_ratio`` of all ``max_epochs``' steps then
    linear decay, token embeddings frozen, batches by `length_batches` (epoch e shuffled by ``"seed/e"``). After each
    epoch the mean cosine distance on ``val_texts`` / ``val_targets`` is measured; the returned model (eval mode) is
    the one after the epoch with the lowest (the first such epoch on ties). Texts are cut to one window of
    ``max_tokens`` tokens; give texts that fit, or the teacher saw more than the student.

    ``passage_targets`` ((m, 384) float32 unit rows: the teacher's vectors of passages; query-side distillation, Wang
    et al. 2023, "Query Encoder Distillation via Embedding Alignment is a Strong Baseline Method to Boost Dense
    Retriever Online Efficiency"): each text's loss adds the KL divergence from the teacher's softmax over the
    passages (its cosines / ``temperature``) to the student's, so the student is taught how the teacher *ranks*
    these fixed passage vectors, not only where its vector lies; the served pair is then the student for queries
    and the teacher for passages. ``start``: an `rag.train.e5.export_onnx` encoder whose weights the student starts
    from before the cut (`bert_from_e5`), e.g. the teacher itself; None: the packaged e5-small.

    Returns ``(model, {"epochs": [{"epoch", "train_distance", "val_distance", "seconds"}], "best_epoch",
    "val_distance_before"})``. Raises ValueError for no texts, no validation texts, row counts that differ from the
    texts', or bad ``layers`` (`bert_from_e5`)."""
    if not texts or not val_texts:
        raise ValueError("distill: needs training and validation texts")
    if len(texts) != len(targets) or len(val_texts) != len(val_targets):
        raise ValueError(f"distill: {len(texts)} texts / {len(targets)} targets, {len(val_texts)} validation texts / "
                         f"{len(val_targets)} targets")
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    tokenizer = E5Tokenizer(e5)
    model = bert_from_e5(e5, layers, start)
    model.embeddings.word_embeddings.weight.requires_grad_(False)
    lengths = [len(ids) for ids in tokenizer.content_ids(list(texts))]
    target = torch.from_numpy(np.asarray(targets, dtype=np.float32))
    val_target = torch.from_numpy(np.asarray(val_targets, dtype=np.float32))
    ranked = None if passage_targets is None else torch.from_numpy(np.asarray(passage_targets, np.float32)).T

    def loss_of(out, goal):
        loss = (1 - (out * goal).sum(1)).mean()
        if ranked is not None:
            loss = loss + torch.nn.functional.kl_div(torch.log_softmax(out @ ranked / temperature, 1),
                                                     torch.log_softmax(goal @ ranked / temperature, 1),
                                                     reduction="batchmean", log_target=True)
        return loss

    def val_distance() -> float:
        model.eval()
        with torch.no_grad():
            cos = torch.cat([(encode(model, tokenizer, val_texts[i:i + 64], max_tokens) * val_target[i:i + 64]).sum(1)
                             for i in range(0, len(val_texts), 64)])
        return float((1 - cos).mean())

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    plans = [length_batches(lengths, batch_size, seed if e == 0 else f"{seed}/{e}") for e in range(max_epochs)]
    total = sum(len(p) for p in plans)
    warmup = math.ceil(warmup_ratio * total)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: step / max(warmup, 1) if step < warmup
        else max(0.0, (total - step) / max(total - warmup, 1)))
    history = {"val_distance_before": round(val_distance(), 6), "epochs": []}
    best, best_state = math.inf, None
    for epoch, plan in enumerate(plans, 1):
        t0 = time.perf_counter()
        model.train()
        losses = []
        for batch in plan:
            out = encode(model, tokenizer, [texts[i] for i in batch], max_tokens)
            loss = loss_of(out, target[batch])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        val = val_distance()
        history["epochs"].append({"epoch": epoch, "train_distance": round(float(np.mean(losses)), 6),
                                  "val_distance": round(val, 6), "seconds": round(time.perf_counter() - t0, 1)})
        print(f"  epoch {epoch}/{max_epochs} ({len(plan)} steps): train distance "
              f"{np.mean(losses):.5f}, validation {val:.5f}", flush=True)
        if val < best:
            best, best_state, history["best_epoch"] = val, copy.deepcopy(model.state_dict()), epoch
    model.load_state_dict(best_state)
    return model.eval(), history


def prefixed_with_targets(teacher: E5Embedder, texts: Mapping[str, Sequence[str]], max_tokens: int = 512):
    """``(prefixed texts, (n, 384) float32 teacher unit rows, n dropped)`` for ``{"queries": [...], "passages":
    [...]}``: queries as ``"query: "`` + text, passages as ``"passage: "`` + text, each embedded by ``teacher``
    (`E5Embedder`); texts longer than one window of ``max_tokens`` tokens are dropped (the teacher would average
    windows the student never sees)."""
    tokenizer = teacher.tokenizer
    fits = {role: [t for t, ids in zip(texts[role], tokenizer.content_ids([prefix + t for t in texts[role]]))
                   if len(ids) <= max_tokens - 2]
            for role, prefix in (("queries", QUERY), ("passages", PASSAGE))}
    prefixed = [QUERY + t for t in fits["queries"]] + [PASSAGE + t for t in fits["passages"]]
    targets = np.vstack([teacher.embed_queries(fits["queries"]), teacher.embed_passages(fits["passages"])])
    dropped = sum(len(texts[r]) for r in fits) - len(prefixed)
    return prefixed, targets.astype(np.float32), dropped


def distill_seeds(e5: E5File, teacher: E5Embedder, texts: Mapping[str, Mapping[str, Sequence[str]]],
                  settings: Mapping, scored: Callable[[object, str], dict], log: str) -> list[dict]:
    """One `distill` student per seed in ``settings["seeds"]`` (with its ``layers``, ``max_epochs``, ``batch_size``,
    ``lr``, ``warmup_ratio``, ``weight_decay``, ``threads``, ``max_tokens`` and optionally ``start``, a path: see
    `distill`), taught by ``teacher`` on
    ``texts["train"]`` and stopped early on ``texts["val"]`` (`teaching_texts`' shape), each passed to
    ``scored(model, "seed{n}")`` before the next is trained. With ``settings["side"]`` "queries" (default "both")
    the student learns the query texts only, ranked against the teacher's vectors of the training passages
    (`distill`'s ``passage_targets``, at ``settings["temperature"]``). Returns ``[{"seed", "texts", "val_texts",
    "dropped", "train_s", "history", **scored}]``. Raises KeyError naming a missing setting, ValueError for another
    side."""
    side = settings.get("side", "both")
    if side not in ("both", "queries"):
        raise ValueError(f"side must be 'both' or 'queries', got {side!r}")
    parts, passages = texts, None
    if side == "queries":
        parts = {name: {"queries": part["queries"], "passages": []} for name, part in texts.items()}
        passages = teacher.embed_passages(texts["train"]["passages"])
    train, train_targets, dropped = prefixed_with_targets(teacher, parts["train"], settings["max_tokens"])
    val, val_targets, val_dropped = prefixed_with_targets(teacher, parts["val"], settings["max_tokens"])
    out = []
    for seed in settings["seeds"]:
        t0 = time.perf_counter()
        print(f"{log}: seed {seed}: {len(train)} teaching texts, {len(val)} validation texts"
              + (f", ranked against {len(passages)} passages" if passages is not None else ""), flush=True)
        model, history = distill(e5, settings["layers"], train, train_targets, val, val_targets, seed,
                                 settings["max_epochs"], settings["batch_size"], settings["lr"],
                                 settings["warmup_ratio"], settings["weight_decay"], settings["threads"],
                                 settings["max_tokens"], passages, settings.get("temperature", 0.01),
                                 settings.get("start"))
        out.append({"seed": seed, "texts": len(train), "val_texts": len(val), "dropped": dropped + val_dropped,
                    "train_s": round(time.perf_counter() - t0, 1), "history": history,
                    **scored(model, f"seed{seed}")})
    return out
