# The Makefile is the interface: CI and the README call these targets unchanged.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# A CPU build of torch, installed by pip (from wherever pip is set up to find it) before the
# package, so that the range in pyproject.toml is met without pulling a CUDA build. On a GPU
# machine: make venv TORCH_SPEC="torch==2.14.1"
TORCH_SPEC ?= torch==2.13.0
# uv installs the package and its extras in a fraction of pip's time; pip brings it into the venv.
UV_SPEC ?= uv==0.13.9
# Every extra but mujoco (a large native package, for the MuJoCo envs alone).
EXTRAS ?= dev,atari,video,plot,tune,s3,serve,export,track
TRAIN_ARGS ?= --env CartPole-v1 --target-return 450

.PHONY: venv train test test-long lint typecheck unit fast bench clean docs learn-pong learn-breakout

# torch first, with pip; then uv, told TORCH_SPEC again, keeps the torch it finds installed (it
# downloads no other build) and installs the rest, pip's newest release among them. Nothing is
# compiled to bytecode here: Python does that on first import.
$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --no-compile "$(TORCH_SPEC)" "$(UV_SPEC)"
	$(BIN)/uv pip install --quiet --python $(BIN)/python --upgrade-package pip \
	  -e ".[$(EXTRAS)]" "$(TORCH_SPEC)" pip
	touch $@

venv: $(BIN)/.installed

train: venv
	$(BIN)/a3c-ray train $(TRAIN_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/python docs/tools/check_docs.py

typecheck: venv
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest -m "not ray and not long" -q

# Everything that needs neither Ray nor a learning run: under a minute, for the edit-test loop.
fast: venv
	$(BIN)/pytest -m "not ray and not slow and not long" -q

# What CI runs: lint, mypy, then every test but the long proofs, each of which keeps a short
# counterpart here. The tests that bring up local clusters of their own (the chaos smoke, the
# lost-cluster round) mostly wait on other processes: they start first, in a second pytest that
# runs beside lint, mypy and the other tests, and their report follows the others' (it is
# written to $(CLUSTER_LOG)); that pytest collects only the modules that mark tests `cluster`.
# make test fails when either part fails.
CLUSTER_LOG ?= .cluster-tests.log
CLUSTER_TESTS = $(shell grep -l 'mark\.cluster' tests/test_*.py)
test: venv
	@echo "make test: the cluster tests run beside the others, reported at the end"
	@$(BIN)/pytest $(CLUSTER_TESTS) -m "cluster and not long" -q -p no:cacheprovider > $(CLUSTER_LOG) 2>&1 & cluster=$$!; \
	$(MAKE) --no-print-directory lint typecheck && \
	$(BIN)/pytest -m "not cluster and not long" -q --durations=25; rest=$$?; \
	wait $$cluster; clustered=$$?; \
	echo "--- the cluster tests (pytest -m 'cluster and not long'):"; cat $(CLUSTER_LOG); \
	[ $$rest -eq 0 ] && [ $$clustered -eq 0 ]

# The long proofs (learning to a target over several seeds, the chaos soak, a whole cluster lost
# twice, full PBT and ASHA searches): run them before changing learning, recovery, the
# ParameterServer or the cluster path.
test-long: venv
	$(BIN)/pytest -m long -q --durations=0

bench: venv
	$(BIN)/a3c-ray bench throughput

# A shipped Atari config trained in sittings, one Worker per CPU: it stops at the config's target,
# then draws its learning curve and prints the frames and hours to each of its levels
# (docs/atari.md). Run it again to continue the same run from its newest checkpoint.
# <GAME>_SITTING=3600 bounds one sitting to an hour (Ctrl-C after that long: a final checkpoint,
# then the curve so far); --time-limit in <GAME>_ARGS bounds the training time of all sittings.
#   $(call learn,CONFIG,GAME): the run in $(GAME_RUN), with $(GAME_ARGS), plotted at $(GAME_LEVELS).
define learn
	$(if $($(2)_SITTING),timeout -s INT $($(2)_SITTING)) $(BIN)/a3c-ray train \
	  $(if $(wildcard $($(2)_RUN)/config.yaml),--resume $($(2)_RUN),--config $(1) --run-dir $($(2)_RUN)) \
	  $($(2)_ARGS); rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 124 ] || [ $$rc -eq 130 ] || exit $$rc
	$(BIN)/a3c-ray plot $($(2)_RUN) --levels=$($(2)_LEVELS) --out $($(2)_RUN)
endef

# Pong: it stops at an evaluation of 18.
PONG_RUN ?= runs/pong
PONG_ARGS ?=
PONG_SITTING ?=
PONG_LEVELS := -15,0,10,18
learn-pong: venv
	$(call learn,pong,PONG)

# Breakout, the feed-forward agent: it stops at an evaluation of 300.
BREAKOUT_RUN ?= runs/breakout
BREAKOUT_ARGS ?=
BREAKOUT_SITTING ?=
BREAKOUT_LEVELS := 50,150,300
learn-breakout: venv
	$(call learn,breakout,BREAKOUT)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .mypy_cache

# docs/configuration.md's table of fields is generated from the dataclasses' docstrings.
docs: venv
	$(BIN)/python -c "import pathlib, a3c_ray.config.docs as c; p = pathlib.Path('docs/configuration.md'); \
	head = p.read_text().split('## Every field')[0]; p.write_text(head + '## Every field\n\n' + c.markdown_table())"
