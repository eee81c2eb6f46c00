# Two entry points: `make demo` (the main job) and `make test` (the test suite).
# Each creates .venv and installs what is missing, so a fresh machine needs nothing else.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORPUS := /usr/share/trans/de-en
DEMO_MINUTES ?= 15
BENCH_MINUTES ?= 12
# TensorFlow on tcmalloc: glibc's malloc hands large freed tensor buffers back to the kernel
# and faults them in again (up to 2.7x slower training here; docs/guides/performance.md).
# The keras-transformer command preloads it by itself; pytest and the benchmarks get it
# here. Recursive (=): looked up when a recipe runs, after `make tcmalloc` installed it.
TCMALLOC_PATHS := /usr/lib/$(shell uname -m)-linux-gnu/libtcmalloc_minimal.so.4 \
	/usr/lib64/libtcmalloc_minimal.so.4 /usr/lib/libtcmalloc_minimal.so.4
TCMALLOC = $(firstword $(foreach path,$(TCMALLOC_PATHS),$(shell test -f $(path) && echo $(path))))
WITH_TCMALLOC = $(if $(TCMALLOC),LD_PRELOAD="$(TCMALLOC)$${LD_PRELOAD:+:$$LD_PRELOAD}" \
	TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD=1099511627776)

# The backend-neutral tests also run under JAX and PyTorch (CPU builds; the default torch
# wheel would pull several GB of CUDA libraries). A backend that cannot be installed is
# skipped with its reason, visibly.
BACKEND_TESTS := tests/layers tests/models tests/losses tests/metrics tests/optimizers \
	tests/generation tests/importers
BACKENDS_STAMP := $(VENV)/.backends
TORCH_CPU ?= torch==2.13.0+cpu

.PHONY: demo test lint corpus tcmalloc install backends bench docs

# pip -qq: errors still show, pip's and setuptools' notices do not.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -qq --upgrade pip
	$(BIN)/pip install -qq -e ".[dev]"
	touch $(STAMP)

install: $(STAMP) tcmalloc

$(BACKENDS_STAMP): $(STAMP)
	$(BIN)/pip install -qq "jax[cpu]" || echo "WARNING: could not install jax[cpu]"
	$(BIN)/pip install -qq "$(TORCH_CPU)" || echo "WARNING: could not install $(TORCH_CPU)"
	touch $(BACKENDS_STAMP)

backends: $(BACKENDS_STAMP)

# The real corpus is the Debian package trans-de-en (see docs/guides/data.md).
corpus:
	@if [ -f $(CORPUS) ]; then :; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && apt-get install -y -qq trans-de-en; \
	else \
		echo "The corpus $(CORPUS) is missing: run 'sudo apt-get install trans-de-en'" \
		     "or pass KT_CORPUS=/path/to/de-en (download it from dict.tu-chemnitz.de)."; \
	fi

# tcmalloc (Debian package libtcmalloc-minimal4): optional, so a failed install only warns.
tcmalloc:
	@if [ -n "$(TCMALLOC)" ]; then :; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && apt-get install -y -qq libtcmalloc-minimal4 \
			|| echo "WARNING: could not install libtcmalloc-minimal4; TensorFlow runs on glibc's malloc"; \
	else \
		echo "tcmalloc is missing (TensorFlow trains up to 2.7x faster on it): run" \
		     "'sudo apt-get install libtcmalloc-minimal4' (RHEL: 'sudo dnf install gperftools-libs')."; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP) $(BACKENDS_STAMP) corpus tcmalloc lint
	$(WITH_TCMALLOC) KERAS_BACKEND=tensorflow TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/pytest -q tests keras_transformer
	@for backend in jax torch; do \
		if $(BIN)/python -c "import $$backend" 2>/dev/null; then \
			echo "== the backend tests under KERAS_BACKEND=$$backend"; \
			$(WITH_TCMALLOC) KERAS_BACKEND=$$backend $(BIN)/pytest -q -p no:cacheprovider $(BACKEND_TESTS) \
				|| exit 1; \
		else \
			echo "SKIPPED: the tests under KERAS_BACKEND=$$backend: the $$backend package" \
			     "is not installed and pip could not install it (make backends)"; \
		fi; \
	done

demo: $(STAMP) corpus tcmalloc
	KERAS_BACKEND=tensorflow TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/keras-transformer demo --minutes $(DEMO_MINUTES)

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(STAMP) corpus
	$(WITH_TCMALLOC) KERAS_BACKEND=tensorflow TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python benchmarks/run.py --minutes $(BENCH_MINUTES)
