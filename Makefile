# dlcomm: `make train` runs the default job, `make test` the test suite. Both set up first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip --disable-pip-version-check
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
# The torch build (docs/slurm.md, "Installing on a cluster"): the default pins are a CUDA 13.0 build
# (NVIDIA driver >= 580) that also runs on CPUs. A site with an older driver picks a CUDA 12 build
# from PyTorch's index, e.g. `make setup TORCH_INDEX=https://download.pytorch.org/whl/cu126`;
# TORCH_PINS="torch==... torchvision==..." changes the versions. `dlcomm doctor` checks the result.
DEFAULT_TORCH := torch==2.14.1 torchvision==0.29.1
TORCH_PINS ?= $(DEFAULT_TORCH)
TORCH_INDEX ?=
# A cluster node (docs/slurm.md, "Installing on a cluster"): TORCH=site builds the venv over the torch
# that SITE_PYTHON imports (module, container, conda), never installing one; WHEELHOUSE=<folder>
# installs from that folder alone (no index; `make wheelhouse` writes one where the index is reachable).
TORCH ?=
SITE_PYTHON ?= python3
WHEELHOUSE ?=
WHEEL_PYTHON ?= $(shell python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
# another torch choice is another stamp, so that choosing one installs it into an existing venv
STAMP := $(VENV)/.dlcomm-installed$(if $(TORCH)$(WHEELHOUSE)$(TORCH_INDEX)$(filter-out $(DEFAULT_TORCH),$(TORCH_PINS)),-$(shell printf '%s' '$(TORCH) $(WHEELHOUSE) $(TORCH_PINS) $(TORCH_INDEX)' | cksum | cut -d' ' -f1))
INSTALL := python3 scripts/install.py

HEARTBEAT := python3 scripts/heartbeat.py --show "^(Collecting|Installing collected|Successfully installed|ERROR|error)"

.PHONY: setup train test test-fast lint format data clean-results wheelhouse

setup: $(STAMP) data

# Re-installs only when pyproject.toml changes; the project itself is installed editable.
$(STAMP): pyproject.toml
ifeq ($(TORCH),site)
	@$(INSTALL) site --python $(SITE_PYTHON) --venv $(VENV) $(if $(WHEELHOUSE),--wheelhouse $(WHEELHOUSE))
else ifneq ($(WHEELHOUSE),)
	@$(INSTALL) offline --venv $(VENV) --wheelhouse $(WHEELHOUSE) --torch-pins $(TORCH_PINS)
else
	@test -x $(PY) || python3 -m venv $(VENV)
	@echo "installing dlcomm and its dependencies into $(VENV) (a few minutes the first time)"
	@# a line per package as pip collects and installs it, and one at least every 10 s while it downloads
	@# or unpacks a large wheel in silence (scripts/heartbeat.py; -q left minutes without a word)
	@$(if $(TORCH_INDEX),$(HEARTBEAT) -- $(PIP) install --progress-bar off $(TORCH_PINS) --index-url $(TORCH_INDEX) || { echo "error: no $(TORCH_PINS) at $(TORCH_INDEX)" >&2; exit 1; })
	@$(HEARTBEAT) -- $(PIP) install --progress-bar off $(TORCH_PINS) -e '.[test]' || true
	@$(PY) -c "import dlcomm, torch, hydra, mlflow" || { echo "error: the install failed; see the pip output above" >&2; exit 1; }
endif
	@touch $(STAMP)

# every wheel dlcomm needs but torch's, for CPython WHEEL_PYTHON on x86-64 Linux (sdist-only ones built)
wheelhouse:
	@test -n "$(WHEELHOUSE)" || { echo "error: name the folder: make wheelhouse WHEELHOUSE=<folder> [WHEEL_PYTHON=3.12]" >&2; exit 2; }
	@$(INSTALL) wheelhouse --out $(WHEELHOUSE) --python-version $(WHEEL_PYTHON)

# DATA_FROM=<folder holding the four Fashion-MNIST idx files> copies them where dataset=fashion_mnist
# reads them (a node without apt or internet); else Debian's package
DATA_FROM ?=
data:
	@if [ -n "$(DATA_FROM)" ]; then \
	  ls $(DATA_FROM)/*-idx?-ubyte.gz >/dev/null 2>&1 || { echo "error: no *-idx?-ubyte.gz files in DATA_FROM=$(DATA_FROM)" >&2; exit 2; }; \
	  mkdir -p $(dir $(FMNIST)) 2>/dev/null && cp $(DATA_FROM)/*-idx?-ubyte.gz $(dir $(FMNIST)) \
	    || { echo "error: cannot write $(dir $(FMNIST)): pass dataset.root=$(DATA_FROM) to dlcomm instead" >&2; exit 2; }; \
	  echo "data: Fashion-MNIST copied from $(DATA_FROM) to $(dir $(FMNIST))"; \
	elif [ ! -f $(FMNIST) ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's dataset-fashion-mnist"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null; \
	  else \
	    echo "Fashion-MNIST is missing: run 'sudo apt-get install dataset-fashion-mnist' (or set dataset.root=...)"; \
	  fi; \
	fi

train: setup
	$(VENV)/bin/dlcomm train $(ARGS)

# The suite on TEST_WORKERS pytest-xdist workers, then the `alone` tests one at a time (tests/conftest.py
# keeps the SLURM tests on one worker). 2 on this 2-core machine: since most runs moved into the test's
# process (cli_here) the suite is CPU-bound, and a third worker only shares the cores (parallel part at
# 298231d, one clean clone, back to back: 21:29 with 3 workers, 20:10 with 2; docs/benchmarks.md).
# Exit status 5 is pytest's "nothing selected" (ARGS naming tests of one part only), not a failure.
# --max-worker-restart=0: a worker that dies (killed, crashed) fails the test it ran and is not
# replaced; with restarts, one such death at 5d6fc57 left xdist waiting on idle workers until CI's limit.
TEST_WORKERS ?= 2
PYTEST_PARALLEL = $(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadgroup --max-worker-restart=0
PYTEST_ALONE = $(VENV)/bin/pytest -q
OK_IF_NONE = || [ $$? -eq 5 ]
test: setup
	@parallel=0; $(PYTEST_PARALLEL) -m "not alone" $(ARGS) $(OK_IF_NONE) || parallel=1; \
	$(PYTEST_ALONE) -m alone $(ARGS) $(OK_IF_NONE) && exit $$parallel

# the unit tier: no end-to-end runs, SLURM or namespace hosts (markers in pyproject.toml)
test-fast: setup
	@parallel=0; $(PYTEST_PARALLEL) -m "not slow and not slurm and not hosts and not alone" $(ARGS) $(OK_IF_NONE) || parallel=1; \
	$(PYTEST_ALONE) -m "alone and not slow and not slurm and not hosts" $(ARGS) $(OK_IF_NONE) && exit $$parallel

# mypy type-checks src/, scripts/ and the tests' helper modules, unannotated bodies included ([tool.mypy] in
# pyproject.toml; cold ~22 s of CPU here, as src/ alone took: the rest adds modules, not libraries; warm under
# 1 s from .mypy_cache).
# mypy, not pyright: pyright's PyPI package downloads Node.js from the internet on its first run, and this
# machine and CI reach only the package registries.
lint: setup
	$(VENV)/bin/ruff check src tests scripts
	$(VENV)/bin/ruff format --check src tests scripts
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff check --fix src tests scripts
	$(VENV)/bin/ruff format src tests scripts

clean-results:
	rm -rf results/mlflow.db results/mlartifacts results/runs

# ---- reproduce a paper: its scaled-down runs on this machine, then `dlcomm report` --------------
# Each writes results/<experiment>/ (table.md, table.csv, table.tex, PNGs); results/README.md sets
# them beside the papers' numbers. Times are for a 2-core machine.
DLCOMM := $(VENV)/bin/dlcomm
# Simulated time is charged from the experiment's committed compute profile (network.compute=profile;
# docs/network.md): results/<experiment>/compute_profile.json, measured on the machine that made the
# committed tables, so a rerun repeats every simulated column exactly, on any machine and under any
# load. Delete the file to charge this machine's own step instead (it is measured again, in seconds).
PROFILE = network.compute_profile=$(CURDIR)/results/$(1)/compute_profile.json
results/%/compute_profile.json:
	$(DLCOMM) profile experiment=$* --out $@
.PHONY: reproduce-compression reproduce-sesgd reproduce-layerdrop reproduce-crossover reproduce-crossover-largebatch reproduce-crossover-time reproduce-node-based reproduce-wan-gossip reproduce-wan-compare

# Gradient compression (docs/compression.md): AllReduce-SGD at 8 workers with every compressor and PowerSGD at
# ranks 1, 2, 4, one epoch, simulated 1 Gb/s with seeds 0-2 and 10 Gb/s with seed 0 (40 runs as threads, ~75 s
# each here: ~50 min). Under network.mode=simulate the network moves the clock only, never the trajectory: a
# 10 Gb/s run trains the model its 1 Gb/s twin trains (results/README.md checks it), so seeds 1-2 at 10 Gb/s
# would repeat the 1 Gb/s accuracies at 25 more minutes
reproduce-compression: setup
	$(DLCOMM) train -m experiment=compression_fmnist network=eth_1g compress=none,fp16,bf16,topk,randomk,qsgd,sign seed=0,1,2
	$(DLCOMM) train -m experiment=compression_fmnist network=eth_1g compress=powersgd compress.rank=1,2,4 seed=0,1,2
	$(DLCOMM) train -m experiment=compression_fmnist network=eth_10g compress=none,fp16,bf16,topk,randomk,qsgd,sign seed=0
	$(DLCOMM) train -m experiment=compression_fmnist network=eth_10g compress=powersgd compress.rank=1,2,4 seed=0
	$(DLCOMM) report experiment=compression_fmnist

# SESGD (Fig. 5 at three latencies; Table 2: five methods x seeds 0-2, one epoch, 8 ranks as threads): 16 minutes here
reproduce-sesgd: setup results/sesgd_fig5/compute_profile.json
	$(DLCOMM) train -m experiment=sesgd_fig5 $(call PROFILE,sesgd_fig5) algo=allreduce,sesgd algo.bucket_mb=0 network.inter.latency_ms=0.1,1,5
	$(DLCOMM) train -m experiment=sesgd_table2 algo=allreduce,node_based,local_sgd seed=0,1,2 train.epochs=1
	$(DLCOMM) train -m experiment=sesgd_table2 algo=sesgd,local_sesgd algo.groups=2 seed=0,1,2 train.epochs=1
	$(DLCOMM) report experiment=sesgd_fig5
	$(DLCOMM) report experiment=sesgd_table2

# Layer dropping (Table 1 at both network settings: ResNet-18 on Fashion-MNIST, plain PS and
# R = 0.9, 0.95, 0.97, seeds 0-2; 24 runs of 100 steps): 35-37 minutes here (200 steps: 61 minutes)
reproduce-layerdrop: setup results/layerdrop_1g/compute_profile.json results/layerdrop_56g/compute_profile.json
	$(DLCOMM) train -m experiment=layerdrop_1g $(call PROFILE,layerdrop_1g) algo=ps seed=0,1,2
	$(DLCOMM) train -m experiment=layerdrop_1g $(call PROFILE,layerdrop_1g) algo=ps_layerdrop algo.ratio=0.9,0.95,0.97 seed=0,1,2
	$(DLCOMM) train -m experiment=layerdrop_56g $(call PROFILE,layerdrop_56g) algo=ps seed=0,1,2
	$(DLCOMM) train -m experiment=layerdrop_56g $(call PROFILE,layerdrop_56g) algo=ps_layerdrop algo.ratio=0.9,0.95,0.97 seed=0,1,2
	$(DLCOMM) report experiment=layerdrop_1g
	$(DLCOMM) report experiment=layerdrop_56g

# Crossover-SGD (Fig. 6 mixing; Fig. 10 accuracy at 4, 16 and 64 workers sharing a global mini-batch of
# 1,024, crossover / SGP / AllReduce, seeds 0-2, one epoch, ranks as threads: 27 runs): 20 minutes here
reproduce-crossover: setup
	$(DLCOMM) topology compare=crossover,crossover_unfair,sgp nodes=16 steps=20
	$(DLCOMM) train -m experiment=crossover_scaling algo=crossover,sgp,allreduce nodes=4 train.batch_size=256 seed=0,1,2
	$(DLCOMM) train -m experiment=crossover_scaling algo=crossover,sgp,allreduce nodes=16 train.batch_size=64 seed=0,1,2
	$(DLCOMM) train -m experiment=crossover_scaling algo=crossover,sgp,allreduce nodes=64 train.batch_size=16 seed=0,1,2
	$(DLCOMM) report experiment=crossover_scaling

# Crossover-SGD Fig. 9 (accuracy against the global mini-batch: 16 workers, micro-batches of 32 accumulated 2 or 8
# times = 1,024 or 4,096, and 64 workers, micro-batches of 8 accumulated 8 times = 4,096; LARS, 3 epochs,
# crossover / SGP / AllReduce, seeds 0-2: 27 runs as threads): 46 minutes here
reproduce-crossover-largebatch: setup
	$(DLCOMM) train -m experiment=crossover_largebatch algo=crossover,sgp,allreduce train.comm_interval=2,8 seed=0,1,2
	$(DLCOMM) train -m experiment=crossover_largebatch algo=crossover,sgp,allreduce nodes=64 train.batch_size=8 seed=0,1,2
	$(DLCOMM) report experiment=crossover_largebatch

# Crossover-SGD Fig. 11 (simulated time per iteration, 8 workers, 10 Gb/s, ResNet-18-sized messages, crossover /
# crossover_hier / SGP / AllReduce at three compute scales: 12 runs of 20 steps as threads): 21 minutes here
reproduce-crossover-time: setup results/crossover_time/compute_profile.json
	$(DLCOMM) train -m experiment=crossover_time $(call PROFILE,crossover_time) algo=allreduce,sgp,crossover,crossover_hier network.compute_scale=1,0.2,0.05
	$(DLCOMM) report experiment=crossover_time

# Node-based averaging (Table III: the five clusters 2x2 to 8x2, K' = 50, an MLP for 10 epochs, seeds 0-2): 34 minutes here (30 runs)
reproduce-node-based: setup results/node_based_table3/compute_profile.json
	$(DLCOMM) train -m experiment=node_based_table3 $(call PROFILE,node_based_table3) algo=allreduce nodes=2,4,6,8 seed=0,1,2
	$(DLCOMM) train -m experiment=node_based_table3 $(call PROFILE,node_based_table3) algo=allreduce nodes=4 workers_per_node=4 seed=0,1,2
	$(DLCOMM) train -m experiment=node_based_table3 $(call PROFILE,node_based_table3) algo=node_based algo.k_prime=50 nodes=2,4,6,8 seed=0,1,2
	$(DLCOMM) train -m experiment=node_based_table3 $(call PROFILE,node_based_table3) algo=node_based algo.k_prime=50 nodes=4 workers_per_node=4 seed=0,1,2
	$(DLCOMM) report experiment=node_based_table3

# Wide-area pull-gossip (Table 3 setting, 2 wide workers, 25 simulated s, two seeds): 65 to 100 minutes here
# (10 runs of 6-14 min, most of it training 8 NiN workers on 2 cores): over the 60-minute aim
reproduce-wan-gossip: setup results/wan_gossip_fmnist/compute_profile.json
	$(DLCOMM) train -m experiment=wan_gossip_fmnist $(call PROFILE,wan_gossip_fmnist) algo.overlap=none seed=1,2
	$(DLCOMM) train -m experiment=wan_gossip_fmnist $(call PROFILE,wan_gossip_fmnist) algo.overlap=naive,scheduled algo.scheduler=managed,autonomous seed=1,2
	$(DLCOMM) report experiment=wan_gossip_fmnist

# The wide-area comparison (issues 51, 61; not a paper's table): AllReduce-SGD, Local-SGD, DiLoCo, Streaming DiLoCo (4
# fragments, tau 10, alpha 0.5; fp32 and 4-bit outer gradients), pull-gossip with scheduled overlap, SparseLoCo
# (H 50, top-32 of 64-chunks, 2-bit values), MuLoCo (H 50, inner Muon) and DeMo (every step, signed, inner
# SGD's lr 1e-3 as its step), overlapped DiLoCo at its references' outer settings (delayed: prime's and PCCL's plain outer
# SGD, lr 0.7, no momentum; eager: the eager paper's Nesterov at lr 0.4; at DiLoCo's 0.9 / 0.7 both collapse here:
# docs/algorithms.md), 8 workers as threads on network=wan_hetero, 30 simulated s each, seeds 0-2 (33 runs)
WAN_COMPARE = $(DLCOMM) train -m experiment=wan_compare $(call PROFILE,wan_compare) seed=0,1,2
reproduce-wan-compare: setup results/wan_compare/compute_profile.json
	$(WAN_COMPARE) algo=allreduce
	$(WAN_COMPARE) algo=local_sgd algo.period=50
	$(WAN_COMPARE) algo=diloco algo.period=50
	$(WAN_COMPARE) algo=diloco algo.period=50 algo.overlap=delayed algo.outer_momentum=0
	$(WAN_COMPARE) algo=diloco algo.period=50 algo.overlap=eager algo.outer_lr=0.4
	$(WAN_COMPARE) algo=streaming_diloco algo.period=50 algo.fragments=4 algo.overlap_steps=10 compress=none,lowbit
	$(WAN_COMPARE) algo=gossip_pull algo.overlap=scheduled
	$(WAN_COMPARE) algo=sparseloco algo.period=50
	$(WAN_COMPARE) algo=muloco optim=muon algo.period=50
	$(WAN_COMPARE) algo=demo optim=sgd optim.lr=1e-3
	$(DLCOMM) report experiment=wan_compare
