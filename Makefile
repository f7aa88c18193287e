# moecal — every target uses .venv (created by `make setup`, or on demand by the targets that need it).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CONFIG ?=
BACKEND ?= auto
OUT    ?=
# `make sweep` calibrates mlxcel itself when its benchmark and model folders are here (moecal init, then the sweep
# of that config); otherwise, or with CONFIG=..., it runs the built-in config. It prints which, and why.
BENCH  ?= $(shell command -v mlxcel-bench-decode 2>/dev/null)
MODELS ?= models
MLXCEL_CONFIG ?= results/_scratch/mlxcel-calibration.yaml
SWEEP_WHY = $(strip $(if $(CONFIG),CONFIG=$(CONFIG) given,$(if $(BENCH),$(if $(wildcard $(MODELS)/*/config.json),\
  found benchmark $(BENCH) and model folders in $(MODELS),no model folder with config.json in $(MODELS)/ (MODELS=dir)),\
  no mlxcel-bench-decode on PATH (BENCH=path))))
SWEEP_MLXCEL = $(filter found,$(firstword $(SWEEP_WHY)))
# MODELS=dir named on the command line asks for mlxcel: without its benchmark, stop rather than sweep the CPU preset
SWEEP_STOP = $(if $(CONFIG)$(BENCH),,$(if $(filter command line environment,$(origin MODELS)),\
  MODELS=$(MODELS) given but no mlxcel-bench-decode on PATH: give BENCH=path (or CONFIG= for a built-in sweep)))
RESUME ?=

.PHONY: check setup test lint mypy-baseline sweep bench bench-kernels bench-harness verify gpu-check device-wheels clean help

help:
	@echo "make setup          create .venv with the CPU backend, NVRTC compile checks and dev tools"
	@echo "make test           lint + pytest (GPU tests skip with a reason) + check-reports on stored results"
	@echo "make sweep          calibrate mlxcel (BENCH=, MODELS=models) if present, else this machine's config (CONFIG=)"
	@echo "                    RESUME=1 continues the newest unfinished run, RESUME=results/<run> that one"
	@echo "make bench-kernels  µs/step and GB/s of fused vs fallback kernels (BACKEND=auto|cpu|cuda|metal)"
	@echo "make bench-harness  the harness's own CPU/wall per run (no-op benchmark, +500 idle processes), summarize 10k/1M rows"
	@echo "make verify         every kernel path vs the float64 reference (BACKEND=...)"
	@echo "make gpu-check      the one prepared GPU script (BACKEND=cuda by default; BACKEND=cpu rehearses it)"
	@echo "make device-wheels  fetch cp312 wheels the H200 image lacks into .whl/ (carry them to the device)"
	@echo "make check          regression gate: BASELINE=results/<stored> CURRENT=results/<new>"
	@echo "make lint | clean    (lint: ruff, mypy against mypy-baseline.txt, actionlint)"
	@echo "make mypy-baseline  rewrite mypy-baseline.txt from today's mypy errors (after fixing some, or moving modules)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@# setuptools warns on every editable install of a flat layout (a folder named like the package in the working
	@# directory could shadow it): known and intended here, so that one warning is silenced by its message
	PYTHONWARNINGS='ignore:Editable installation' $(BIN)/python -m pip install -q -e '.[cpu,nvrtc,dev,fleet]'
	@touch $@

setup: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/mypy_baseline.py
	$(BIN)/actionlint -config-file .github/actionlint.yaml .github/workflows/*.yml

test: $(STAMP) lint
	$(BIN)/python -m pytest -n 2 --dist loadfile  # two processes (CI has 2 cores); one file stays on one process
	$(BIN)/moecal check-reports reports/

sweep: $(STAMP)
	$(if $(SWEEP_STOP),$(error make sweep: $(strip $(SWEEP_STOP))))
	@echo "make sweep: $(if $(SWEEP_MLXCEL),calibrating mlxcel,built-in config for this machine) — $(SWEEP_WHY)"
	$(if $(SWEEP_MLXCEL),$(BIN)/moecal init --models $(MODELS) --bench '$(BENCH)' --out $(MLXCEL_CONFIG))
	$(BIN)/moecal sweep $(if $(SWEEP_MLXCEL),$(MLXCEL_CONFIG),$(CONFIG)) $(if $(OUT),--out $(OUT),) \
	  $(if $(filter 1,$(RESUME)),--resume,$(if $(RESUME),--resume=$(RESUME),))

check: $(STAMP)
	$(BIN)/moecal check --baseline $(BASELINE) --current $(CURRENT)

verify: $(STAMP)
	$(BIN)/moecal verify --backend $(BACKEND)

bench: bench-kernels

mypy-baseline: $(STAMP)
	$(BIN)/python scripts/mypy_baseline.py --write

bench-harness: $(STAMP)
	$(BIN)/python scripts/bench_harness.py

bench-kernels: $(STAMP)
	$(BIN)/moecal bench-kernels --backend $(BACKEND) --out $(or $(OUT),reports/_scratch)/bench-kernels-$(BACKEND).csv

gpu-check:
	BACKEND=$(if $(filter auto,$(BACKEND)),cuda,$(BACKEND)) CONFIG=$(CONFIG) bash scripts/gpu_check.sh

device-wheels: $(STAMP)
	PY=$(BIN)/python bash scripts/fetch_device_wheels.sh

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .mypy_cache reports/_scratch results/_scratch
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
