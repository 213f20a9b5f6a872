"""voice-rag: grounded answers to speech-recogniser transcripts from a knowledge base.

Code, not the model, decides what to search (`rag.voice.rewrite`, `rag.voice.followup`), whether to answer
(`rag.voice.gate`) and what may be said (`rag.voice.verify`). Nothing in this package reads params.yaml or argv;
the DVC stages in `stages/` and the CLI (`python -m rag`) pass every setting in. Packages by concern:
`retrieval`, `voice`, `llm`, `memory`, `ko`, `eval`, `bench` (README, Layout).
"""
