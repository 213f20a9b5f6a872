"""The Korean track: Kiwi tokenisation, dense retrieval (USE-multilingual; multilingual-e5-small fine-tuned on
KorQuAD train), grounded answers with [문서 n] citations."""
