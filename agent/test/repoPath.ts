// Absolute paths of repository files for tests, wherever the test file sits.
import path from "node:path";

const ROOT = path.resolve(import.meta.dirname, "../..");

export const repoPath = (...parts: string[]): string => path.join(ROOT, ...parts);
