#!/usr/bin/env bash
# The final job of .github/workflows/fleet-calibration.yml, runnable by hand and driven by tests/measure/test_fleet_workflow.py:
# every downloaded run directory (one artifact per machine, ARTIFACTS/<artifact name>/) → one per-backend defaults
# addendum with its switch_layers.rs patch and autotune entries (moecal report over all runs), the pull request body
# (the addendum), and one github-action-benchmark file (moecal export per run, the entries concatenated).
# usage: scripts/fleet_merge.sh ARTIFACTS OUT [MOECAL]   (MOECAL: the command to run, default `moecal`)
set -euo pipefail
artifacts=$1
out=$2
read -r -a moecal <<< "${3:-moecal}"
runs=()
while IFS= read -r -d '' dir; do
  if [[ -e "$dir/samples.csv" || -e "$dir/meta.json" ]]; then runs+=("$dir"); fi
done < <(find "$artifacts" -mindepth 1 -maxdepth 1 -type d -print0 | sort -z)
if (( ${#runs[@]} == 0 )); then
  echo "fleet_merge: no run directory under $artifacts" >&2
  exit 2
fi
mkdir -p "$out/export"
"${moecal[@]}" report "${runs[@]}" --out "$out"
for run in "${runs[@]}"; do
  "${moecal[@]}" export --format github-action-benchmark "$run" --out "$out/export/$(basename "$run").json"
done
python3 - "$out/export" "$out/github-action-benchmark.json" <<'PY'
import json, pathlib, sys
entries = [e for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")) for e in json.loads(f.read_text())]
pathlib.Path(sys.argv[2]).write_text(json.dumps(entries, indent=1) + "\n")
PY
addenda=("$out"/*-dff-defaults.md)
cp "${addenda[0]}" "$out/pr-body.md"
echo "fleet_merge: ${#runs[@]} runs → ${addenda[0]}, $out/pr-body.md, $out/github-action-benchmark.json"
