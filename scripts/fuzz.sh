#!/usr/bin/env bash
# Runs every Go fuzz target in the module (found by grepping for
# "func FuzzX(f *testing.F)") for FUZZTIME each (default 10s; use minutes
# locally: FUZZTIME=3m scripts/fuzz.sh). Optional args narrow the set to
# target names matching a regexp. FUZZFLAGS adds go test flags (-parallel 1).
#
# Go 1.26's fuzz coordinator can fail a target with a bare "context
# deadline exceeded" at the -fuzztime boundary without having found
# anything (go.dev/issue/75804, fixed in Go 1.27). Such a run wrote no
# crasher under testdata/fuzz/<target>/, so it is run again, once; a run
# that writes a crasher, or fails any other way, fails the script.
set -uo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-10s}
only=${1:-.}
fails=0; runs=0
while IFS=: read -r file name; do
  [[ "$name" =~ $only ]] || continue
  dir=$(dirname "$file")
  for attempt in 1 2; do
    before=$(ls "$dir/testdata/fuzz/$name" 2>/dev/null | sort)
    out=$(go test -run='^$' -fuzz="^$name\$" -fuzztime="$FUZZTIME" ${FUZZFLAGS:-} "./$dir/" 2>&1); rc=$?
    after=$(ls "$dir/testdata/fuzz/$name" 2>/dev/null | sort)
    last=$(printf '%s\n' "$out" | grep -E '^fuzz: elapsed' | tail -1)
    if [ $rc = 0 ]; then echo "ok   $dir $name: $last"; break; fi
    if [ "$before" = "$after" ] && grep -q 'context deadline exceeded' <<<"$out" && [ $attempt = 1 ]; then
      echo "again $dir $name: the coordinator's deadline race (no crasher written), running it once more"
      continue
    fi
    printf '%s\n' "$out" | tail -40
    echo "FAIL $dir $name"
    fails=$((fails+1)); break
  done
  runs=$((runs+1))
done < <(grep -rEo --include='*_test.go' '^func (Fuzz[A-Za-z0-9_]+)\(f \*testing\.F\)' cmd pkg ownership tcmu-handler cluster-tests test 2>/dev/null \
          | sed -E 's/:func (Fuzz[A-Za-z0-9_]+).*/:\1/' | sort)
echo "fuzz: $runs targets, $((runs-fails)) passed, $fails failed ($FUZZTIME each)"
[ $fails = 0 ] && [ $runs -gt 0 ]
