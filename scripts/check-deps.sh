#!/usr/bin/env bash
# Fails when the installed environment has a dependency conflict other than lerobot's declared
# torch/torchvision ranges (lerobot 0.6.1 declares torch<2.12; executorch 1.5.1 needs torch 2.14.1),
# nncf's declared networkx range (nncf 3.4.0 declares networkx<=3.6.1; lock.txt has 3.7, which torch has)
# and tosa-tools' declared numpy and flatbuffers pins (tosa-tools 2026.8.0 declares numpy<2.2 and
# flatbuffers==25.2.10; lock.txt has 2.2.6, torch's, and 25.12.19, executorch's).
set -euo pipefail
python=${1:-python}
out=$("$python" -m pip check 2>&1 || true)
rest=$(grep -v -E '^lerobot 0\.6\.1 has requirement (torch|torchvision)[<>=]' <<<"$out" \
  | grep -v -E '^nncf 3\.4\.0 has requirement networkx[<>=]' \
  | grep -v -E '^tosa-tools 2026\.8\.0 has requirement (numpy|flatbuffers)[<>=]' \
  | grep -v '^No broken requirements' || true)
if [ -n "$rest" ]; then
  echo "dependency conflicts beyond lerobot's declared torch pin:" >&2
  echo "$rest" >&2
  exit 1
fi
