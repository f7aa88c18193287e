#!/usr/bin/env bash
# Writes every decision moecal derives from the stored data into one folder, so two trees can be diffed:
#   scripts/decision_snapshot.sh OUT_DIR   (then: diff -r BEFORE AFTER)
# Used to show that a change of structure changed no behaviour: the stored run, both published GB10 sweeps,
# the exclusion case, the compare of the two sweeps, and the stored run's regenerated report.
set -euo pipefail
out=${1:?usage: scripts/decision_snapshot.sh OUT_DIR}
mkdir -p "$out"
m=${MOECAL:-.venv/bin/moecal}
run=results/20261130-cpu-vm-cpu-smoke
a=tests/fixtures/gb10-sweep-2026-07-03.csv
b=tests/fixtures/gb10-design-example.csv
"$m" summarize "$run" --json >"$out/summarize-stored.json"
"$m" crossover "$run" --json >"$out/crossover-stored.json"
"$m" recommend "$run" >"$out/recommend-stored.txt"
"$m" crossover "$a" --json >"$out/crossover-0703.json"
"$m" crossover "$b" --json >"$out/crossover-0710.json"
"$m" crossover "$b" --exclude llama-4-scout-17b-4bit --json >"$out/crossover-0710-exclude.json"
"$m" compare "$a" "$b" --json >"$out/compare-0703-0710.json"
"$m" check --baseline "$run" --current "$run" >"$out/check-self.txt" || echo "rc=$?" >>"$out/check-self.txt"
"$m" report "$run" --out "$out/report" >/dev/null
rm -f "$out"/report/*.png  # a PNG carries renderer metadata; its numbers are in the .json sidecar
"$m" check-reports reports/ >"$out/check-reports.txt"
