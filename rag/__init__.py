"""voice-rag: grounded answers to speech-recogniser transcripts from a knowledge base.

Code, not the model, decides what to search (`rag.rewrite`), whether to answer (`rag.gate`)
and what may be said (`rag.verify`). Nothing in this package reads params.yaml or argv;
the DVC stages in `stages/` and the CLI (`python -m rag`) pass every setting in.
"""
