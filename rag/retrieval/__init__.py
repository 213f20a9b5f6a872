"""Retrieval: KB chunking, the MiniLM embedder (ONNX), BM25 / dense indexes and RRF fusion, the hybrid passage index,
phonetic matching, learned fusion, KB sentences and the KB cache."""
