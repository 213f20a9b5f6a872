"""The LLM: an OpenAI-compatible client (schema-bound answers, streaming, deadlines), the local llama.cpp server,
the registry of the models it can serve (`rag.llm.registry`) and LLM query rewriting (`rag.llm.rewrite`)."""
