// Preloaded into the agent by `npm run bench:footprint` (NODE_OPTIONS
// --import), so the agent itself is measured unchanged. It records every
// module the agent loads (a load hook, for ESM and CommonJS alike) and, on
// SIGUSR2, writes to $FOOTPRINT_OUT: process.memoryUsage(), V8's heap and
// heap-space statistics, the modules loaded so far and, when
// $FOOTPRINT_HEAP_SNAPSHOT names a file, the path of a heap snapshot written
// there first. Nothing runs until the signal but the hook's Set.add.
// Plain JavaScript, not TypeScript: a .ts preload would load Node's type
// stripper (amaro, ~4 MiB of heap) into the very process being measured.
import { writeFileSync } from "node:fs";
import { registerHooks } from "node:module";
import v8 from "node:v8";

const out = process.env.FOOTPRINT_OUT;
const snapshotPath = process.env.FOOTPRINT_HEAP_SNAPSHOT;
const loaded = new Set();

registerHooks({
  load(url, context, nextLoad) {
    loaded.add(url);
    return nextLoad(url, context);
  },
});

if (out) {
  process.on("SIGUSR2", () => {
    // Numbers first: the snapshot itself allocates.
    const report = {
      memoryUsage: process.memoryUsage(),
      heap: v8.getHeapStatistics(),
      spaces: v8.getHeapSpaceStatistics(),
      modules: [...loaded],
      snapshot: snapshotPath ? v8.writeHeapSnapshot(snapshotPath) : null,
    };
    writeFileSync(out, JSON.stringify(report));
  });
}
