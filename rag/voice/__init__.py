"""The voice chain: rewrite the transcript, resolve follow-ups, gate (abstain), ask, verify, select the extractive
sentence, and the pipeline that runs the steps; speech (TTS -> ASR) for the fixtures."""
