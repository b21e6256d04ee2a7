#!/usr/bin/env bash
# Installs what building, running and testing ckptscope needs on Debian 12 (idempotent: apt is
# only called when something is missing).
set -euo pipefail
pkgs=(
  cmake ninja-build g++ ccache pkg-config
  qt6-base-dev qt6-charts-dev libqt6opengl6-dev libgl1-mesa-dev libglx-dev
  libtorch-dev libcli11-dev nlohmann-json3-dev zlib1g-dev libzstd-dev
  python3-torch python3-numpy
  xvfb xauth unzip
  libcurl4-openssl-dev libssl-dev libexpat1-dev nginx-light openssl jq
  clang-14 libclang-rt-14-dev clang-format clang-tidy-14 lld
  debootstrap
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
