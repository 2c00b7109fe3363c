#!/usr/bin/env bash
# check-sleeps: fails on a time.Sleep in a tracked _test.go file without a "// sleep:" comment
# on the same or the previous line saying why real time must pass there. A test that waits
# for a condition uses internal/testenv.Eventually; in-process code with timers runs under
# testing/synctest, where time is simulated.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
git ls-files -z -- '*_test.go' | xargs -0 awk '
	FNR == 1 { prev = "" }
	/time\.Sleep\(/ && $0 !~ /\/\/ sleep:/ && prev !~ /\/\/ sleep:/ {
		printf "%s:%d: time.Sleep without a \"// sleep:\" justification (use testenv.Eventually or testing/synctest)\n", FILENAME, FNR
		bad = 1
	}
	{ prev = $0 }
	END { exit bad }
'
