# zrt — build, test, demo and bench.
GO       ?= go
BIN      ?= bin
SHARED   ?= ../shared
MODEL    ?= $(SHARED)/models/stories260K.gguf
export CGO_ENABLED = 0

.PHONY: all build image cli-docs test test-speculative race vet fmt fuzz demo serve bench kbench clean ptx amd golden generate sweep

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/zrtc ./cmd/zrt-run

# cli-docs: rewrite docs/cli.md from the commands' --help.
cli-docs: build
	docs/gen-cli.sh $(BIN) > $(BIN)/cli.md && mv $(BIN)/cli.md docs/cli.md

# image: the container image, built without a daemon (deploy/image, through cmd/internal/ociimage):
# static linux/amd64 zrtc and zrt-run on an empty base, as a tarball for
# docker load / podman load (IMAGE_TAR) and an OCI layout (IMAGE_LAYOUT).
# Reproducible: SOURCE_DATE_EPOCH (default 0) is every timestamp.
IMAGE_TAG    ?= zrt:latest
IMAGE_TAR    ?= $(BIN)/zrt-image.tar
IMAGE_LAYOUT ?= $(BIN)/zrt-image.oci
image:
	GOOS=linux GOARCH=amd64 $(GO) build -trimpath -o $(BIN)/linux-amd64/ ./cmd/zrtc ./cmd/zrt-run
	$(GO) run ./cmd/internal/ociimage --zrtc $(BIN)/linux-amd64/zrtc --zrt-run $(BIN)/linux-amd64/zrt-run \
		--tag $(IMAGE_TAG) -o $(IMAGE_TAR) --layout $(IMAGE_LAYOUT)

# The CI test command: vet, formatting, and every test (the parity and
# tokenizer suites read ../shared when it is there).
test: vet fmt
	$(GO) test -count=1 ./...

# test-speculative: the engine's and the server's tests with every engine
# speculating (n-gram drafts, then self-drafts through the default
# builds' draft variants, every one verified; the output must not
# change).
test-speculative:
	$(GO) test -count=1 ./runtime/engine/ ./runtime/server/ -args -speculative ngram:4:fixed
	$(GO) test -count=1 ./runtime/engine/ ./runtime/server/ -args -speculative self:4:fixed

# sweep: T-CPU against llama.cpp over every family's options (issue 45):
# internal/sweep's layouts (head widths, grouped and multi-head attention,
# windows, soft caps, experts, per-layer inputs, DeltaNet sizes …) at
# F16, Q8_0, Q6_K, Q5_K_M, Q4_K_M and IQ4_XS, each written by zrtc synth,
# run through llama.cpp by LLAMA_REFDUMP (a reference tool built against
# libllama, kept outside this repository: docs/internals.md#the-fidelity-sweep)
# and compared teacher-forced; prints a table. SWEEP selects layouts by a
# regexp over family/name/type; SWEEP_RECORD=testdata/sweep writes each
# layout that misses the criteria there as a regression case.
LLAMA_REFDUMP ?=
SWEEP         ?=
SWEEP_RECORD  ?=
sweep:
	@if [ -z "$(LLAMA_REFDUMP)" ]; then echo "sweep: set LLAMA_REFDUMP=/path/to/refdump (docs/internals.md#the-fidelity-sweep)"; exit 2; fi
	$(GO) test -v -count=1 -timeout 3h -run '^TestSweep$$' ./internal/sweep -args \
		-refdump "$(abspath $(LLAMA_REFDUMP))" -only '$(SWEEP)' \
		$(if $(SWEEP_RECORD),-record "$(abspath $(SWEEP_RECORD))")

# golden: rewrite the disassembled packet-stream goldens under
# testdata/golden after an intended change to lowering or fusion.
golden:
	ZRT_UPDATE_GOLDEN=1 $(GO) test -count=1 ./compiler -run TestGolden

# fuzz: run every fuzz target for FUZZTIME each (CI: 10s), no
# minimization of new inputs (FUZZMINIMIZETIME 0: a short run that ends
# mid-minimization reports a failure). New crashers land in the package's
# testdata/fuzz and fail the run; commit them, as named regression inputs,
# with the fix. .ci/fuzz says how it tells the toolchain's end-of-run
# deadline race from a finding.
FUZZTIME ?= 10s
FUZZMINIMIZETIME ?= 0
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) FUZZMINIMIZETIME=$(FUZZMINIMIZETIME) .ci/fuzz

race:
	CGO_ENABLED=1 $(GO) test -race -count=1 ./...

vet:
	$(GO) vet ./...

fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# demo_model is the shell that sets $model to MODEL or, where that file
# is missing, to a synthetic random-weight model zrtc writes (its text is
# noise), saying so for target $(1): the demo and serve targets' model.
demo_model = model="$(MODEL)"; \
	if [ ! -f "$$model" ]; then \
		echo "$(1): $$model not found; writing a synthetic random-weight model (its text is noise)"; \
		$(GO) run ./cmd/zrtc synth -o $(BIN)/synthetic.gguf && model=$(BIN)/synthetic.gguf; \
	fi

# demo: build both tools, compile a model, and tell a story. Uses the shared
# stories260K when present, otherwise a synthetic model zrt writes itself.
demo: build
	@$(call demo_model,demo); \
	$(BIN)/zrtc build "$$model" -o $(BIN)/demo.bundle && \
	$(BIN)/zrt-run generate $(BIN)/demo.bundle --prompt "Once upon a time" -n 64 --json

# serve: build the demo model with decode variants for 1–8 requests at once
# and serve it on loopback; open the printed URL for the chat playground.
SERVE_ADDR ?= 127.0.0.1:8080
serve: build
	@$(call demo_model,serve); \
	printf 'decode_slots = [1, 2, 4, 8]\nprefill_rows = [64]\n' > $(BIN)/serve.toml && \
	$(BIN)/zrtc build -q "$$model" --config $(BIN)/serve.toml -o $(BIN)/serve.bundle && \
	echo "serve: open http://$(SERVE_ADDR)/ (Ctrl-C stops)" && \
	$(BIN)/zrt-run serve $(BIN)/serve.bundle --listen $(SERVE_ADDR)

# bench: time MODEL (default stories260K; BENCH_MODEL=… for another GGUF).
# With LLAMA_BENCH=/path/to/llama-bench, runs it on the same model, same
# tests and threads, and prints zrt's ratio to llama.cpp's.
BENCH_MODEL ?= $(MODEL)
THREADS     ?= 2
bench: build
	$(BIN)/zrtc build -q "$(BENCH_MODEL)" -o $(BIN)/bench.bundle
	$(BIN)/zrt-run bench $(BIN)/bench.bundle -p 512 -n 128 -r 3 --threads $(THREADS) \
		$(if $(LLAMA_BENCH),--llama-bench "$(LLAMA_BENCH)" --gguf "$(BENCH_MODEL)")

# generate: rewrite every generated source from its Go table (go generate):
# T-CUDA's families.cuh and instance .cu files from the kernel catalog and
# kernels/cuda/families.go, the AMD targets' instance table, and the amd64
# SIMD assembly (kernels/quant/*_amd64.s, kernels/cpu/*_amd64.s) from the
# kernel tables of kernels/quant/gen and kernels/cpu/gen. Offline and
# deterministic; CI fails when it changes a committed file.
# runtime/tokenizer/unicode_tables.go is not regenerated here: gen_unicode.go
# reads llama.cpp's unicode-data.cpp, which the tree does not hold.
generate:
	$(GO) generate ./...

# ptx: regenerate T-CUDA's committed PTX archive (kernels/cuda/ptx/ptx.tar.zst
# and its manifest SOURCES) from the .cu sources, for every architecture
# (sm_80, sm_90); needs nvcc and Go. Run make generate first after changing
# the catalog or kernels/cuda/families.go. A test fails while the archive is
# stale. On a GPU machine without Go, run kernels/cuda/build_ptx.sh OUT
# there and `go run ./kernels/cuda/gen -dir kernels/cuda -pack OUT` here.
PTX_OUT ?= $(BIN)/ptx
ptx:
	rm -rf $(PTX_OUT)
	kernels/cuda/build_ptx.sh $(PTX_OUT)
	$(GO) run ./kernels/cuda/gen -dir kernels/cuda -pack $(PTX_OUT)

# amd: rebuild the AMD targets' committed code objects (kernels/amd/obj)
# from kernels/amd/kernels.cl; needs Debian's clang-19 and lld-19. Run make
# generate first after changing the catalog or kernels/amd/amd.go. A test
# fails while the committed objects are stale.
amd:
	kernels/amd/build_amd.sh

# kbench: time the CUDA matrix-vector kernels alone at 7B decode shapes
# against a plain read of the same bytes, and the multi-row tile kernels at
# 16 to 512 rows; needs nvcc and a GPU.
kbench:
	nvcc -arch=sm_90 -O3 --fmad=false -std=c++17 -o $(BIN)/mmvbench kernels/cuda/bench/mmvbench.cu
	$(BIN)/mmvbench

clean:
	rm -rf $(BIN)
