"""The LLM: an OpenAI-compatible client (schema-bound answers, streaming, deadlines) and the packaged local llama.cpp
server."""
