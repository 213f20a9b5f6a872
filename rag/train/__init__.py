"""Fine-tuning the dense retriever (issue 14): training pairs without test-split leakage (`rag.train.pairs`, no
PyTorch) and MultipleNegativesRankingLoss training with ONNX export (`rag.train.finetune`, needs the ``.[train]``
extra)."""
