# tether: the verbs a kernel maintainer types. `make setup` makes .venv from nothing.
PY ?= .venv/bin/python
TETHER = $(PY) -m tether
# No GPU: the Triton kernels run in the interpreter (f16/f32 only; bf16 checks skip with why).
# Recursive (=), not simple (:=): make expands it when the test recipe runs, after `setup` has
# made .venv in the same `make setup test`; at make's start there is no torch to ask yet.
NO_GPU = $(shell $(PY) -c 'import torch,sys; sys.exit(torch.cuda.is_available())' 2>/dev/null && echo 1)
TEST_ENV = $(if $(NO_GPU),TRITON_INTERPRET=1,)
JOBS ?= 2

.PHONY: setup demo test docs check verify-held verify-cuda-held verify-rocm-held lint

setup:
	bash ci/setup.sh

demo:
	$(TETHER) demo

test:
	$(TEST_ENV) $(PY) -m pytest -n $(JOBS) -q

docs:
	$(TETHER) render

check:
	$(TETHER) check

lint:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

verify-held:
	$(TETHER) verify --vendor auto

verify-cuda-held:
	$(TETHER) verify --vendor cuda

verify-rocm-held:
	$(TETHER) verify --vendor rocm
