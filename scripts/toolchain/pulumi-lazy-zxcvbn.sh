#!/usr/bin/env bash
# Makes the Pulumi CLI that scripts/setup.sh builds from Go modules start faster. Two of its dependencies,
# zxcvbn-go (github.com/nbutton23 and the github.com/ccojocar fork, which `pulumi config set` and `esc env set`
# ask whether a value looks like a password), decode their frequency lists, about 10 MB of JSON, in package
# init functions, so every run of the CLI paid for them before doing anything: 300-450 ms of the 450-640 ms
# of init in `GODEBUG=inittrace=1 pulumi version` here, about a third of its CPU (issue 39: the suite runs
# the CLI thousands of times; issue 43: every tenant operation starts it). This copies each module out of the
# module cache into OUT with one edit: the lists load on the first password asked about (the matching
# package already loaded them there when they were missing), so the answers are the same. SRC's go.mod then
# replaces the modules with those copies.
# Usage: scripts/toolchain/pulumi-lazy-zxcvbn.sh SRC OUT   (SRC: the CLI's wrapper module, a copy of
# scripts/toolchain/{go.mod,go.sum,tools.go}). Exit 3, SRC untouched: a module's files are not what the edit
# expects (the build goes on without it: slower, not wrong).
set -euo pipefail
src=$1 out=$2
modules=(github.com/nbutton23/zxcvbn-go github.com/ccojocar/zxcvbn-go)
rm -rf "$out" && mkdir -p "$out"
for module in "${modules[@]}"; do
  (cd "$src" && GOFLAGS=-mod=readonly go mod download "$module")
  from=$(cd "$src" && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' "$module")
  copy="$out/${module//\//_}"
  cp -r "$from" "$copy" && chmod -R u+w "$copy"
  # The older module predates modules: a directory replacement needs a go.mod.
  [ -f "$copy/go.mod" ] || echo "module $module" >"$copy/go.mod"
  # frequency: init() becomes Load(), run once.
  perl -0pi -e 's/\n\t"encoding\/json"\n/\n\t"encoding\/json"\n\t"sync"\n/;
    s/\nfunc init\(\) \{\n/\n\/\/ Load fills Lists, once (agent-sandbox: not at init).\nfunc Load() { loadOnce.Do(load) }\n\nvar loadOnce sync.Once\n\nfunc load() {\n/' \
    "$copy/frequency/frequency.go"
  # matching: no init; its loader, which Omnimatch runs while nothing is loaded, loads the lists first.
  perl -0pi -e 's/\nfunc init\(\) \{\n\tloadFrequencyList\(\)\n\}\n//;
    s/\nfunc loadFrequencyList\(\) \{\n/\nfunc loadFrequencyList() {\n\tfrequency.Load()\n/' \
    "$copy/matching/matching.go"
  if ! grep -q '^func Load() { loadOnce.Do(load) }$' "$copy/frequency/frequency.go" ||
    grep -q '^func init()' "$copy/frequency/frequency.go" "$copy/matching/matching.go" ||
    ! grep -q '^	frequency.Load()$' "$copy/matching/matching.go" ||
    ! grep -q 'if dictionaryMatchers == nil || adjacencyGraphs == nil {' "$copy/matching/matching.go"; then
    echo "$module at $from is not what the edit expects" >&2
    exit 3
  fi
done
for module in "${modules[@]}"; do
  (cd "$src" && go mod edit -replace "$module=$out/${module//\//_}")
done
