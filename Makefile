# moecal — every target uses .venv (created by `make setup`, or on demand by the targets that need it).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CONFIG ?=
BACKEND ?= auto
OUT    ?=
RESUME ?=

.PHONY: check setup test lint sweep bench bench-kernels verify gpu-check device-wheels clean help

help:
	@echo "make setup          create .venv with the CPU backend, NVRTC compile checks and dev tools"
	@echo "make test           lint + pytest (GPU tests skip with a reason) + check-reports on stored results"
	@echo "make sweep          a new sweep for this machine (CONFIG=configs/x.yaml, OUT=dir), then report;"
	@echo "                    RESUME=1 continues the newest unfinished run, RESUME=results/<run> that one"
	@echo "make bench-kernels  µs/step and GB/s of fused vs fallback kernels (BACKEND=auto|cpu|cuda|metal)"
	@echo "make verify         every kernel path vs the float64 reference (BACKEND=...)"
	@echo "make gpu-check      the one prepared GPU script (BACKEND=cuda by default; BACKEND=cpu rehearses it)"
	@echo "make device-wheels  fetch cp312 wheels the H200 image lacks into .whl/ (carry them to the device)"
	@echo "make check          regression gate: BASELINE=results/<stored> CURRENT=results/<new>"
	@echo "make lint | clean"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[cpu,nvrtc,dev]'
	@touch $@

setup: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: $(STAMP) lint
	$(BIN)/python -m pytest
	$(BIN)/moecal check-reports reports/

sweep: $(STAMP)
	$(BIN)/moecal sweep $(CONFIG) $(if $(OUT),--out $(OUT),) $(if $(filter 1,$(RESUME)),--resume,$(if $(RESUME),--resume=$(RESUME),))

check: $(STAMP)
	$(BIN)/moecal check --baseline $(BASELINE) --current $(CURRENT)

verify: $(STAMP)
	$(BIN)/moecal verify --backend $(BACKEND)

bench: bench-kernels

bench-kernels: $(STAMP)
	$(BIN)/moecal bench-kernels --backend $(BACKEND) --out $(or $(OUT),reports/_scratch)/bench-kernels-$(BACKEND).csv

gpu-check:
	BACKEND=$(if $(filter auto,$(BACKEND)),cuda,$(BACKEND)) CONFIG=$(CONFIG) bash scripts/gpu_check.sh

device-wheels: $(STAMP)
	PY=$(BIN)/python bash scripts/fetch_device_wheels.sh

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache reports/_scratch results/_scratch
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
