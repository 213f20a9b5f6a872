"""The Korean track: Kiwi tokenisation, USE-multilingual dense retrieval, grounded answers with [문서 n] citations."""
