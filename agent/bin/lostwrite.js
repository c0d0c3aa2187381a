#!/usr/bin/env node
// The `lostwrite` command (package.json "bin"). It runs the CLI from the
// TypeScript source when that is here and this Node strips types (>= 22.18):
// a checkout, where a stale dist/ from an earlier build must not win. Else it
// runs the compiled JavaScript: the image, where deploy/Dockerfile ships
// dist/ and not agent/src. cli.ts parses process.argv as soon as it is
// imported, so importing it is running it.
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const source = new URL("../src/cli.ts", import.meta.url);
const built = new URL("../../dist/agent/src/cli.js", import.meta.url);
const stripsTypes = Boolean(process.features.typescript);

if (stripsTypes && existsSync(fileURLToPath(source))) {
  await import(source.href);
} else if (existsSync(fileURLToPath(built))) {
  await import(built.href);
} else {
  process.stderr.write(
    existsSync(fileURLToPath(source))
      ? `lostwrite: Node ${process.version} cannot run ${fileURLToPath(source)}: use Node >= 22.18 (npm ci installs one: npm exec lostwrite), or npm run build first\n`
      : `lostwrite: ${fileURLToPath(built)} is missing: run npm run build\n`,
  );
  process.exit(1);
}
