#!/bin/sh
# Copy the files the chart ships from where they live in the repository: Helm packages only what
# is inside the chart's folder, and follows no symlink out of it. tests/unit/chart checks that
# the copies are current; run this after editing policies/*.yaml or sunk/scripts/*.sh.
set -eu
cd "$(dirname "$0")/.."
chart=charts/sunk/files
rm -rf "$chart/policies" "$chart/scripts"
mkdir -p "$chart/policies" "$chart/scripts"
cp policies/*.yaml "$chart/policies/"
cp sunk/scripts/*.sh "$chart/scripts/"
echo "synced $(ls "$chart/policies" | wc -l) policy files and $(ls "$chart/scripts" | wc -l) scripts into $chart"
