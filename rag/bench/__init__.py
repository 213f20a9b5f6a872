"""Benchmarks and public-data adapters: HeySQuAD and SQuAD/KorQuAD to BEIR, the compare tables, latency, load and
adversarial sets."""
