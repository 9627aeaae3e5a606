#!/usr/bin/env bash
# Installs the Node.js references that Go tests drive (tools/node/package.json):
# llama.cpp through node-llama-cpp's prebuilt linux-x64 CPU build (engine/gguf's
# test), the official OpenAI SDK and LangChain (gateway's SDK tests). Into
# tools/node/node_modules (gitignored), once per package.json + package-lock.json: a second run
# with the same lock file does nothing. Without node, or when npm cannot reach
# its registry, it says so and exits 0: the tests that need it then skip and
# name the reason.
set -uo pipefail
cd "$(dirname "$0")/../tools/node"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	echo "node-peers: node/npm not installed: the llama.cpp and OpenAI SDK tests will skip"
	exit 0
fi
stamp=node_modules/.specgate-installed
if [ -f "$stamp" ] && cat package.json package-lock.json | cmp -s - "$stamp"; then
	exit 0
fi
# --omit=optional: node-llama-cpp lists every platform's build (CUDA ones are
# 180-360 MB) as optional; package.json names the linux-x64 CPU build itself.
# --ignore-scripts: its postinstall would try to download or compile llama.cpp.
if npm install --no-save --no-audit --no-fund --ignore-scripts --omit=optional --loglevel=error 2>&1 | tail -20; [ "${PIPESTATUS[0]}" = 0 ]; then
	cat package.json package-lock.json >"$stamp"
else
	echo "node-peers: npm install failed: the llama.cpp and OpenAI SDK tests will skip" >&2
fi
exit 0
