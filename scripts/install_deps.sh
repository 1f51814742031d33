#!/usr/bin/env bash
# Installs the Debian packages ZeroTrain builds against, if any are missing, and says which.
# Nothing else is downloaded. The CUDA toolkit is optional: with nvcc at /usr/local/cuda (or on
# PATH) the CUDA code is built too. The multi-node launcher tests (tests/netns) also need sshd and
# ssh, `ip netns` and `ss` (iproute2), Open MPI's mpirun, pdsh, pgrep (procps) and
# libfaketime (a node whose clock is off).
set -euo pipefail

packages=(cmake g++ ninja-build pkg-config nlohmann-json3-dev libfmt-dev libopenblas-dev
          libgtest-dev libgmock-dev libgloo-dev libxxhash-dev python3
          libpcre2-dev libutf8proc-dev zlib1g-dev libzstd-dev
          liburing-dev libaio-dev
          openssh-server openssh-client iproute2 openmpi-bin pdsh procps libfaketime)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "zerotrain: all build dependencies are installed"
  exit 0
fi

echo "zerotrain: installing missing Debian packages: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "zerotrain: error: not root and no sudo; install as root: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "zerotrain: installed ${missing[*]}"
