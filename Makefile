PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup test demo bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile scripts/install_fast_transformers.sh csrc/spe_kernels/setup.py \
          $(wildcard csrc/spe_kernels/*.cpp csrc/spe_kernels/*.h)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip setuptools wheel
	$(BIN)/python -m pip install "torch==2.13.0" numpy
	bash scripts/install_fast_transformers.sh $(VENV)
	$(BIN)/python -m pip install --no-build-isolation --no-deps --force-reinstall ./csrc/spe_kernels
	$(BIN)/python -m pip install --no-deps "tinysoundfont==0.3.7"
	$(BIN)/python -m pip install -e ".[test,studio]"
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

demo: $(STAMP)
	$(BIN)/python -m apps.demo

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
