"""Evaluation shared by the chain and the benchmarks: IR metrics (recall@k, MRR@k, nDCG@k via ir-measures), answer
scoring (factual accuracy, grounded-but-wrong), query-set evaluation helpers. Kept low: the chain imports it, it
imports nothing of the chain."""
