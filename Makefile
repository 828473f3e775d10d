# dlcomm: `make train` runs the default job, `make test` the test suite. Both set up first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip --disable-pip-version-check
STAMP := $(VENV)/.dlcomm-installed
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
TORCH_PINS := torch==2.14.1 torchvision==0.29.1

.PHONY: setup train test data clean-results

setup: $(STAMP) data

# Re-installs only when pyproject.toml changes; the project itself is installed editable.
$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@echo "installing dlcomm and its dependencies into $(VENV) (a few minutes the first time)"
	@$(PIP) install -q $(TORCH_PINS) -e '.[test]' 2>&1 | grep -v "^WARNING: Location" || true
	@$(PY) -c "import dlcomm, torch, hydra, mlflow" || { echo "error: the install failed; see the pip output above" >&2; exit 1; }
	@touch $(STAMP)

data:
	@if [ ! -f $(FMNIST) ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's dataset-fashion-mnist"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null; \
	  else \
	    echo "Fashion-MNIST is missing: run 'sudo apt-get install dataset-fashion-mnist' (or set dataset.root=...)"; \
	  fi; \
	fi

train: setup
	$(VENV)/bin/dlcomm train $(ARGS)

test: setup
	$(VENV)/bin/pytest -q $(ARGS)

clean-results:
	rm -rf results/mlflow.db results/mlartifacts results/runs
