# Fuzz targets; included by the root Makefile.
#
#   make fuzz-smoke              every `func Fuzz` of the root module, sdk/ and
#                                plugin-examples/*, FUZZTIME (3s) each; fails on any failure
#   make fuzz-smoke FUZZTIME=1m  longer runs
#   make fuzz-list               the targets found
#
# make test runs them as test-fuzz: the same runs through testsummary, so that they are in its
# table. A failing input lands in the package's testdata/fuzz/<target>/, which plain
# `go test` replays from then on.

FUZZTIME ?= 3s

.PHONY: fuzz-smoke fuzz-list test-fuzz

fuzz-smoke:
	@GO="$(GO)" FUZZTIME="$(FUZZTIME)" bash hack/fuzz-smoke.sh

test-fuzz: testsummary
	@rm -f $(TEST_RESULTS)/$@.jsonl
	@GO="$(GO)" FUZZTIME="$(FUZZTIME)" TESTSUMMARY="$(TESTSUMMARY)" FUZZ_SAVE="$(TEST_RESULTS)/$@.jsonl" \
		bash hack/fuzz-smoke.sh

fuzz-list:
	@bash hack/fuzz-smoke.sh -l
