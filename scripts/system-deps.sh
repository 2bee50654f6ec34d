#!/usr/bin/env bash
# Debian packages the tests and tools use: Chromium and its driver for the grid's browser tests (with an
# emoji font, so ⏳ and ❌ render), and Mesa's software Vulkan device plus vulkaninfo for the runner probe.
# Installs what is missing when run as root; otherwise says what to install.
set -euo pipefail
packages=(chromium chromium-driver fonts-noto-color-emoji mesa-vulkan-drivers vulkan-tools)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${missing[*]} (run: sudo apt-get install -y ${missing[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
