"""Run directories and the file formats they hold: samples.csv, meta.json, provenance, mlxcel's CSVs."""
