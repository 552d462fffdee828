#!/usr/bin/env bash
# Writes a large real-world minified bundle and its source map (about 30 MB) into the
# directory given as the first argument: big.min.js and big.min.js.map. esbuild
# bundles a few large npm packages (versions pinned below) together and minifies them.
# The optional second argument is a seed that fixes the order the packages are
# bundled in, so a run is reproducible and other seeds give other, equally sized
# layouts. Needs node and npm; the packages are installed into a temp dir.
#
# Used by benches/sourcemap.rs; its output is not committed.
set -euo pipefail

out="${1:?usage: gen-big-sourcemap.sh OUT_DIR [SEED]}"
# Absolute: esbuild runs in the temp dir.
mkdir -p "$out"
out="$(cd "$out" && pwd)"
seed="${2:-1}"

ESBUILD_VERSION=0.28.2
PACKAGES=(typescript@5.6.3 three@0.170.0 echarts@5.5.1 lodash@4.17.21 rxjs@7.8.1 d3@7.9.0 moment@2.30.1 chart.js@4.4.6 @babel/parser@7.26.2 acorn@8.14.0 immutable@4.3.7 zod@3.23.8 date-fns@4.1.0)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
npm install --prefix "$tmp" --no-audit --no-fund --silent \
  "esbuild@$ESBUILD_VERSION" "${PACKAGES[@]}" >/dev/null

# The entry imports every package, in an order shuffled by a small seeded generator.
node - "$seed" "${PACKAGES[@]}" > "$tmp/entry.js" <<'JS'
const [seed, ...packages] = process.argv.slice(2);
let state = Number(seed) >>> 0 || 1;
const next = () => (state = (Math.imul(state, 1664525) + 1013904223) >>> 0);
const names = packages.map((p) => p.slice(0, p.lastIndexOf("@")));
for (let i = names.length - 1; i > 0; i--) {
  const j = next() % (i + 1);
  [names[i], names[j]] = [names[j], names[i]];
}
names.forEach((name, i) => console.log(`import * as m${i} from ${JSON.stringify(name)};`));
console.log(`globalThis.__bundled = [${names.map((_, i) => `m${i}`).join(", ")}];`);
JS

mkdir -p "$out"
(cd "$tmp" && ./node_modules/.bin/esbuild entry.js --bundle --minify --sourcemap \
  --platform=node --format=cjs --log-level=error --outfile="$out/big.min.js")
ls -l "$out/big.min.js" "$out/big.min.js.map"
