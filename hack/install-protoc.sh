#!/usr/bin/env bash
# Makes sure protoc (3 or later), the protobuf compiler hack/update-codegen.sh
# runs, is installed: Debian's protobuf-compiler package when it is missing and this
# machine can install packages. Prints protoc's directory as the only line
# on stdout.
set -o errexit -o nounset -o pipefail
exec 3>&1 1>&2

if ! command -v protoc >/dev/null 2>&1; then
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-protoc: protoc is not installed; install protoc 3 (Debian and Ubuntu: apt-get install protobuf-compiler)" >&2
    exit 1
  fi
  echo "install-protoc: installing Debian's protobuf-compiler" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends protobuf-compiler ||
    { apt-get update && apt-get install -y --no-install-recommends protobuf-compiler; }
fi
# go-to-protobuf writes proto2 files, which every protoc from 3 on compiles.
version=$(protoc --version)
major=${version#libprotoc }
major=${major%%.*}
if ! [[ ${major} =~ ^[0-9]+$ ]] || ((major < 3)); then
  echo "install-protoc: ${version} found; the generators need protoc 3 or later" >&2
  exit 1
fi
dirname "$(command -v protoc)" >&3
